#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/status.h"
#include "worker/comm/communicator.h"

namespace dslaunch::worker::comm {

// The completion of one MPI operation, shared by its Work and its stream.
struct MpiOpState {
  bool done = false;  // under the stream's mutex
  core::Status status;
};

// What every MPI communicator of a process shares: the injected stall, and
// the list of live communicators whose progress heartbeats report.
class MpiTransport final : public Transport {
 public:
  void stall_from_next_collective() override { stall_.store(true); }
  // Where a thread starting an operation blocks for good once a stall was asked for.
  void stall_point() const;

  std::vector<GroupProgress> progress() const override;
  int64_t wire_bytes(std::string_view axis) const override;
  std::map<std::string, CommStats> stats_by_axis() const override;
  // Adds an operation's bytes to those of `axis` (a communicator's axis()).
  void count_wire_bytes(std::string_view axis, int64_t bytes);
  void add(const Communicator* communicator);
  void remove(const Communicator* communicator);
  void attach(const Communicator* communicator) override;
  void detach(const Communicator* communicator) override;

 private:
  // An attached communicator's wire bytes, from its statistics.
  static int64_t wire_bytes_of(const Communicator& communicator);

  std::atomic<bool> stall_{false};
  mutable std::mutex wire_mutex_;
  std::map<std::string, int64_t, std::less<>> wire_bytes_;  // by communicator axis
  mutable std::mutex mutex_;
  std::vector<const Communicator*> communicators_;
  std::vector<const Communicator*> attached_;  // under mutex_, also in communicators_
};

// The thread that makes one communicator's MPI calls, in the order they were
// queued (NCCL's model: one stream per communicator). Compute threads only
// queue operations and wait for them, so no compute thread ever calls MPI.
//
// Collectives run as blocking MPI calls, one at a time: Open MPI's blocking
// collectives use its tuned algorithms, while a single thread multiplexing
// nonblocking ones (libnbc) reached 0.1-0.4x of MPI_Allreduce's bus
// bandwidth here (bench/reducer_bench). A blocked stream holds up only its
// own communicator, whose operations every rank queues in the same order, so
// streams cannot deadlock each other. Sends and receives are started
// nonblocking and tested between operations (a blocking send could wait for
// a peer's receive queued behind that peer's own send), asleep for
// `poll_interval` when nothing else is to be done, twice as long after each
// test that completes nothing, up to 1 ms: a transfer that completes at
// once is seen at once, and one that waits for a busy peer (a pipeline
// stage in another chunk's pass) costs no core on an oversubscribed
// machine. Several streams call MPI at once: MPI_THREAD_MULTIPLE.
class MpiStream {
 public:
  using Start = std::function<int(MPI_Request*)>;  // starts a nonblocking call
  using Blocking = std::function<int()>;           // a blocking call; its code

  MpiStream(const MpiTransport& transport, std::chrono::microseconds poll_interval);
  // Operations not yet started are dropped; a blocking call running
  // completes first; requests in flight are abandoned (their Works stay not
  // done). Joins the thread.
  ~MpiStream();
  MpiStream(const MpiStream&) = delete;
  MpiStream& operator=(const MpiStream&) = delete;

  // Queue an operation; `state` completes when it does. Return at once.
  // `start` and what it captures live until the request completes, as
  // nonblocking MPI calls need.
  void submit(Start start, std::shared_ptr<MpiOpState> state);
  void submit_blocking(Blocking call, std::shared_ptr<MpiOpState> state);
  // Runs `call` in queue order and waits for it (creating or freeing a
  // communicator); its code.
  int call(Blocking call);

  // Waits until `state` is done or `timeout` passed (0 = forever); whether done.
  bool wait(const MpiOpState& state, std::chrono::milliseconds timeout);
  bool done(const MpiOpState& state) const;
  void stall_point() const { transport_.stall_point(); }

 private:
  struct Pending {
    Start start;        // nonblocking, or
    Blocking blocking;  // blocking
    std::shared_ptr<MpiOpState> state;
  };

  void loop();
  void run(Pending& pending);
  // Whether any operation completed.
  bool test_in_flight();
  void complete(const std::shared_ptr<MpiOpState>& state, core::Status status);

  const MpiTransport& transport_;
  const std::chrono::microseconds poll_interval_;

  mutable std::mutex mutex_;
  std::condition_variable queued_or_stopping_;
  std::condition_variable completed_;
  std::deque<Pending> queue_;
  bool stopping_ = false;

  // Stream thread only: sends and receives in flight, and their requests.
  std::vector<Pending> in_flight_;
  std::vector<MPI_Request> requests_;
  std::chrono::microseconds idle_poll_;  // the next sleep between tests

  std::thread thread_;
};

}  // namespace dslaunch::worker::comm
