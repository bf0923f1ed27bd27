#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "worker/comm/communicator.h"
#include "worker/comm/mpi_stream.h"

namespace dslaunch::worker::comm {

// A Communicator over one MPI communicator, whose MPI calls its own
// MpiStream makes. Owns its MPI communicator (with
// MPI_ERRORS_RETURN) and frees it on destruction, which MPI makes collective
// over the group: destroy on every rank, before MPI_Finalize.
//
// After a transport failure the communicator is broken: that failure sticks
// and every later operation fails at once with it, no MPI call made.
class MpiCommunicator final : public Communicator {
 public:
  // Takes `comm` over. world_ranks: of the group's ranks, by group rank.
  // `transport` outlives this object.
  MpiCommunicator(MpiTransport& transport, MPI_Comm comm, std::string axis,
                  std::vector<int> world_ranks, WaitPolicy policy,
                  std::chrono::microseconds poll_interval);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  std::string_view axis() const override { return axis_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  std::chrono::milliseconds timeout() const override { return policy_.timeout; }
  const WaitPolicy& wait_policy() const override { return policy_; }

  std::unique_ptr<Work> all_reduce(BufferRef buffer, ReduceOp op) override;
  std::unique_ptr<Work> all_reduce(BufferRef in, BufferRef out, ReduceOp op) override;
  std::unique_ptr<Work> reduce_scatter(BufferRef in, BufferRef out, std::span<const int64_t> counts,
                                       ReduceOp op) override;
  std::unique_ptr<Work> all_gather(BufferRef in, BufferRef out, const Blocks& blocks) override;
  std::unique_ptr<Work> broadcast(BufferRef buffer, int root) override;
  std::unique_ptr<Work> all_to_all(BufferRef in, BufferRef out) override;
  std::unique_ptr<Work> all_to_all(BufferRef in, const Blocks& sent, BufferRef out,
                                   const Blocks& received) override;
  std::unique_ptr<Work> send(BufferRef buffer, int peer) override;
  std::unique_ptr<Work> recv(BufferRef buffer, int peer) override;
  std::unique_ptr<Work> barrier() override;
  std::unique_ptr<Work> then(std::function<void()> host) override;

  core::StatusOr<std::unique_ptr<Communicator>> duplicate(std::string_view label) override;
  core::StatusOr<std::unique_ptr<Communicator>> split(std::string_view label, int color) override;
  CommStats stats() const override;
  int64_t collectives_started() const override;

 private:
  class MpiWork;

  // What a report of this operation says: "data all_reduce #12 of 4.0 MiB
  // over world ranks 0, 1".
  std::string describe(OpKind kind, int64_t sequence, int64_t bytes, int peer) const;
  // Counts the operation, then queues the collective `call` or the
  // point-to-point `start` on the stream (or fails at once when the
  // communicator is broken or `invalid` is not ok).
  // `wire`: the bytes sent to peers, when wire_bytes(kind, bytes) does not
  // say it (blocks of any size).
  std::unique_ptr<Work> launch(OpKind kind, int64_t bytes, int peer, core::Status invalid,
                               MpiStream::Blocking call, std::optional<int64_t> wire = {});
  std::unique_ptr<Work> launch_p2p(OpKind kind, int64_t bytes, int peer, core::Status invalid,
                                   MpiStream::Start start);
  std::unique_ptr<Work> queue(OpKind kind, int64_t bytes, int peer, core::Status invalid,
                              const std::function<void(std::shared_ptr<MpiOpState>)>& submit,
                              std::optional<int64_t> wire = {});
  void note_failure(const core::Status& status);

  MpiTransport& transport_;
  std::unique_ptr<MpiStream> stream_;
  const std::chrono::microseconds poll_interval_;
  MPI_Comm comm_;
  const std::string axis_;
  const std::vector<int> world_ranks_;
  const WaitPolicy policy_;
  int rank_ = 0;

  mutable std::mutex mutex_;  // launch order, the statistics and the failure
  CommStats stats_;
  std::atomic<int64_t> collectives_{0};  // read by the heartbeat thread
  core::Status broken_;
};

}  // namespace dslaunch::worker::comm
