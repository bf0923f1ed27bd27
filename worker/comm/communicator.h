#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace dslaunch::worker::comm {

// Collectives move the engine's element types (core/dtype.h); bf16 and fp16
// travel for 16-bit training, reduced in fp32 by the caller.
using core::DType;
using core::dtype_bytes;
using core::dtype_name;

enum class ReduceOp { kSum, kMax, kMin };

// Memory a collective reads or writes: `count` elements of `dtype`, in the
// memory the communicator works on (host memory for MPI's, a GPU's for
// NCCL's and the host-staged one's).
struct BufferRef {
  void* data = nullptr;
  int64_t count = 0;
  DType dtype = DType::kF32;
  int64_t bytes() const { return count * dtype_bytes(dtype); }
};
inline BufferRef buffer_of(float* data, int64_t count) { return {data, count, DType::kF32}; }
inline BufferRef buffer_of(double* data, int64_t count) { return {data, count, DType::kF64}; }
inline BufferRef buffer_of(int32_t* data, int64_t count) { return {data, count, DType::kI32}; }
inline BufferRef buffer_of(int64_t* data, int64_t count) { return {data, count, DType::kI64}; }
inline BufferRef buffer_of(uint8_t* data, int64_t count) { return {data, count, DType::kU8}; }
// Send buffers are only read; the transport's interface takes them as writable.
inline BufferRef buffer_of(const float* data, int64_t count) {
  return {const_cast<float*>(data), count, DType::kF32};
}

// Variable-size blocks of a gather or a scatter, per rank of the group, in
// elements; block r starts at displacements[r] of the whole buffer.
struct Blocks {
  std::vector<int64_t> counts;
  std::vector<int64_t> displacements;
  // Consecutive blocks of these sizes.
  static Blocks consecutive(std::vector<int64_t> counts);
};

// The operations, for the statistics and for the reports of a hang.
enum class OpKind {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kAllToAll,
  kSend,
  kRecv,
  kBarrier,
};
inline constexpr int kOpKindCount = 8;
std::string_view op_name(OpKind kind);  // "all_reduce", ...

// One operation in flight (c10d's Work). The buffers it was given belong to
// it until wait() returns ok or done() is true.
class Work {
 public:
  virtual ~Work() = default;
  // Waits for the operation. kDeadlineExceeded after `timeout` names the
  // operation, its group, its size and the peers it waits on; the operation
  // stays in flight (its buffers still belong to it), and the caller is
  // expected to report a hang, not to carry on. Any other failure comes from
  // the transport and sticks to the communicator.
  virtual core::Status wait(std::chrono::milliseconds timeout) = 0;
  // wait() with the communicator's WaitPolicy: its timeout
  // (fault_tolerance.collective_timeout), and on a deadline its on_deadline
  // before returning.
  virtual core::Status wait() = 0;
  virtual bool done() const = 0;
};

// What a rank knows of a collective it waits in past its timeout: enough
// for the controller to find, in the other members' heartbeats (their
// collectives_started per group), the ones that never started it.
struct HangReport {
  std::string group;          // the communicator's axis(), e.g. "data/gradients"
  int64_t sequence = 0;       // the collective's number on it (collectives_started when it began)
  std::vector<int> world_ranks;  // the group's members
};

// How Work::wait() without a timeout waits.
struct WaitPolicy {
  std::chrono::milliseconds timeout{0};  // 0 = forever
  // Called with the kDeadlineExceeded status (and, for a collective, what
  // it waits in) when wait() passes `timeout`.
  // The operation is still in flight and may yet write its buffers, so the
  // worker reports the hang here and ends the process without returning:
  // unwinding would free memory a late peer could still write into.
  // Unset: wait() returns the status.
  std::function<void(const core::Status&, const HangReport&)> on_deadline;
};

// The bytes this rank sends to its peers in one operation of `kind` whose
// send buffer (all_gather: this rank's block; reduce_scatter: the whole
// input) holds `bytes`, over `ranks` ranks, under the bandwidth-optimal
// algorithms (ring all-reduce 2(p-1)/p, reduce-scatter and all-to-all
// (p-1)/p, all-gather (p-1) blocks, a broadcast's root the buffer, a send
// its buffer): what "bytes on the wire" means in the metrics, the same
// whatever algorithm MPI picks.
int64_t wire_bytes(OpKind kind, int64_t bytes, int ranks);

// Bytes and calls per operation this rank started on a communicator.
struct CommStats {
  struct Op {
    int64_t calls = 0;
    int64_t bytes = 0;  // what this rank handed to the transport: its send buffer
    int64_t wire_bytes = 0;  // of which sent to peers, as wire_bytes() counts
    // Collectives: seconds their MPI calls took on the communication thread,
    // from when each began (its turn in the queue) to its end: the latency
    // DeepSpeed's comms logger reports. Sends and receives: 0.
    double seconds = 0;
  };
  Op ops[kOpKindCount];
  int64_t calls() const;
  int64_t bytes() const;
};

// A process group and the collectives on it (c10d's ProcessGroup): one per
// grid axis (data, tensor, pipeline) and one for the world. Every rank of
// the group must start the same collectives in the same order; the calls
// return at once, the Work completes later. Thread-safe: operations from
// any threads are started in the order their calls return, which must then
// be the same order on every rank.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // in this group
  virtual int size() const = 0;
  // "world", "data", "tensor", "pipeline": in reports and statistics.
  virtual std::string_view axis() const = 0;
  // The world ranks of this group, by group rank: the peers a report names.
  virtual const std::vector<int>& world_ranks() const = 0;
  // The timeout wait() uses; 0 = wait forever.
  virtual std::chrono::milliseconds timeout() const = 0;
  virtual const WaitPolicy& wait_policy() const = 0;

  // In place: every rank's buffer becomes the reduction over ranks.
  virtual std::unique_ptr<Work> all_reduce(BufferRef buffer, ReduceOp op) = 0;
  // Out of place: `out` (as many elements as `in`) becomes the reduction of
  // every rank's `in`.
  virtual std::unique_ptr<Work> all_reduce(BufferRef in, BufferRef out, ReduceOp op) = 0;
  // Reduces `in` (the sum of all blocks' counts) over ranks; rank r receives
  // the reduction of block r (blocks consecutive, from the start of `in`)
  // into `out`, blocks.counts[r] elements.
  virtual std::unique_ptr<Work> reduce_scatter(BufferRef in, BufferRef out,
                                               std::span<const int64_t> counts,
                                               ReduceOp op) = 0;
  // Rank r's `in` (blocks.counts[r] elements) lands in every rank's `out` at
  // blocks.displacements[r]. `in` may be this rank's own block of `out`
  // (gathering in place).
  virtual std::unique_ptr<Work> all_gather(BufferRef in, BufferRef out, const Blocks& blocks) = 0;
  virtual std::unique_ptr<Work> broadcast(BufferRef buffer, int root) = 0;
  // `in` and `out` each hold size() equal blocks; block r of `in` goes to rank r.
  virtual std::unique_ptr<Work> all_to_all(BufferRef in, BufferRef out) = 0;
  // Blocks of any size (MPI_Alltoallv): block r of `in` (as `sent` places
  // it) goes to rank r, and rank r's block for this one lands in `out` as
  // `received` places it; every rank's sent.counts[q] must equal rank q's
  // received.counts[r]. The bytes on the wire are those of the blocks sent
  // to other ranks.
  virtual std::unique_ptr<Work> all_to_all(BufferRef in, const Blocks& sent, BufferRef out,
                                           const Blocks& received) = 0;
  virtual std::unique_ptr<Work> send(BufferRef buffer, int peer) = 0;  // peer: a group rank
  virtual std::unique_ptr<Work> recv(BufferRef buffer, int peer) = 0;
  virtual std::unique_ptr<Work> barrier() = 0;
  // Runs `host` in this communicator's order: after every operation started
  // before it, before any started after (CUDA's cudaLaunchHostFunc), so
  // work between two collectives costs no round trip to the caller's
  // thread. Local: no peer takes part, nothing is counted.
  virtual std::unique_ptr<Work> then(std::function<void()> host) = 0;
  // Where operations run on a stream of the device's (NCCL's): its native
  // handle (a cudaStream_t, for kernels::Backend::borrow_stream()), on which
  // work queued after an operation starts runs after it, and before the
  // operations started later, without the host waiting; each operation
  // runs after the default stream's work queued before it starts. nullptr
  // where operations complete on the host (MPI's, host staging's).
  virtual void* device_stream() { return nullptr; }

  // A new communicator over the same ranks whose traffic never meets this
  // one's: for a component that starts operations from a thread of its own
  // (operations on one communicator must start in the same order on every
  // rank, which two threads sharing it could not promise). Its axis() is
  // "<axis>/<label>". Collective over the group.
  virtual core::StatusOr<std::unique_ptr<Communicator>> duplicate(std::string_view label) = 0;
  // A new communicator over this group's ranks of the same `color`, in
  // group-rank order (ZeRO++'s host groups); its axis() is "<axis>/<label>".
  // Collective over the group.
  virtual core::StatusOr<std::unique_ptr<Communicator>> split(std::string_view label,
                                                              int color) = 0;

  virtual CommStats stats() const = 0;
  // Collectives this rank has started on the group (sends and receives not
  // counted): ranks of a healthy group agree on it between steps, and the one
  // that lags is the one a hung collective waits on.
  virtual int64_t collectives_started() const = 0;
};

// What the communicators of a process share (for MPI: the injected stall
// and the list of live communicators): owned beside them, outliving them.
// A communicator's count of collectives started, as heartbeats carry it.
struct GroupProgress {
  std::string group;  // its axis(): "data", "data/gradients", ...
  int64_t started = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Every live communicator's collectives_started(); thread-safe.
  virtual std::vector<GroupProgress> progress() const = 0;
  // The wire_bytes() of every operation started so far on the process's
  // communicators of `axis` and those made from them ("data" counts
  // "data/gradients" too; "" every axis), those destroyed since included;
  // thread-safe.
  virtual int64_t wire_bytes(std::string_view axis) const = 0;
  // Every live communicator's stats(), summed by axis(); thread-safe.
  virtual std::map<std::string, CommStats> stats_by_axis() const = 0;
  // Fault injection (testing.fault stall_collective): the next thread to
  // start an operation on any communicator blocks forever, as if this rank
  // never entered its next collective; the rest of the process (heartbeats)
  // goes on.
  virtual void stall_from_next_collective() = 0;
  // A communicator over the same ranks made outside this transport (NCCL's,
  // on a GPU's memory): counted with the live ones (progress(),
  // stats_by_axis()) and its operations' wire bytes with its axis's, those
  // before the call included, until detach(), after which its bytes so far
  // still count. It must stay alive until detach(). Thread-safe.
  virtual void attach(const Communicator* communicator) = 0;
  virtual void detach(const Communicator* communicator) = 0;
};

// Waits for `work` with its communicator's timeout: ok, or the failure with
// `context` in front.
core::Status wait_for(Work& work, std::string_view context);

}  // namespace dslaunch::worker::comm
