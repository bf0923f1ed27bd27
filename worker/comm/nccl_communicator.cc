// The NCCL communicator (--config=cuda): the Communicator interface over
// buffers in GPU memory, each operation queued on a CUDA stream of the
// communicator's own and completed through a CUDA event.
#include "worker/comm/nccl_communicator.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

namespace dslaunch::worker::comm {
namespace {

core::Status nccl_failure(ncclResult_t result, std::string_view what) {
  return core::Status(core::StatusCode::kUnavailable,
                      fmt::format("NCCL {}: {}", what, ncclGetErrorString(result)));
}

core::Status cuda_failure(cudaError_t error, std::string_view what) {
  return core::Status(core::StatusCode::kUnavailable,
                      fmt::format("CUDA {}: {}", what, cudaGetErrorString(error)));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

// Element `index` of a buffer of `dtype`.
void* at(const BufferRef& buffer, int64_t index) {
  return static_cast<char*>(buffer.data) + index * dtype_bytes(buffer.dtype);
}

bool all_equal(std::span<const int64_t> counts) {
  for (int64_t count : counts) {
    if (count != counts.front()) return false;
  }
  return true;
}

// A host function queued on the stream (then()).
void run_host_function(void* data) {
  std::unique_ptr<std::function<void()>> host(static_cast<std::function<void()>*>(data));
  (*host)();
}

class NcclCommunicator;

// One operation on the stream: done when its event is.
class NcclWork final : public Work {
 public:
  NcclWork(NcclCommunicator& owner, cudaEvent_t done, OpKind kind, int64_t bytes, int64_t sequence,
           core::Status failed)
      : owner_(owner),
        done_(done),
        kind_(kind),
        bytes_(bytes),
        sequence_(sequence),
        failed_(std::move(failed)) {}
  ~NcclWork() override {
    if (done_ != nullptr) cudaEventDestroy(done_);
  }
  core::Status wait(std::chrono::milliseconds timeout) override;
  core::Status wait() override;
  bool done() const override {
    return !failed_.ok() || done_ == nullptr || cudaEventQuery(done_) == cudaSuccess;
  }

 private:
  NcclCommunicator& owner_;
  cudaEvent_t done_;
  OpKind kind_;
  int64_t bytes_;
  int64_t sequence_;
  core::Status failed_;
};

class NcclCommunicator final : public Communicator {
 public:
  // `host` alone, or `owned` (a duplicate or split of another's host, kept).
  NcclCommunicator(Communicator& host, std::unique_ptr<Communicator> owned, ncclComm_t comm,
                   cudaStream_t stream)
      : host_(host),
        owned_host_(std::move(owned)),
        axis_(std::string(host.axis()) + "/nccl"),
        comm_(comm),
        stream_(stream) {}
  // Destroys the NCCL communicator once its operations are done; aborts it
  // where one failed or does not finish within the timeout (a peer that
  // never came would keep it waiting forever).
  ~NcclCommunicator() override {
    bool finished = !broken_.load();
    const auto start = std::chrono::steady_clock::now();
    while (finished && cudaStreamQuery(stream_) == cudaErrorNotReady) {
      const std::chrono::milliseconds limit = timeout();
      if (!async_error().ok() ||
          (limit.count() > 0 && std::chrono::steady_clock::now() - start > limit)) {
        finished = false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (finished) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (scratch_ != nullptr) cudaFree(scratch_);
    cudaStreamDestroy(stream_);
  }

  core::Status init() {
    if (cudaError_t e = cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming);
        e != cudaSuccess) {
      return cuda_failure(e, "creating an event");
    }
    if (cudaError_t e = cudaMalloc(&scratch_, sizeof(float)); e != cudaSuccess) {
      return cuda_failure(e, "allocating the barrier's float");
    }
    return {};
  }

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  // "<host's axis>/nccl": its collectives are counted apart from the host's.
  std::string_view axis() const override { return axis_; }
  const std::vector<int>& world_ranks() const override { return host_.world_ranks(); }
  std::chrono::milliseconds timeout() const override { return host_.timeout(); }
  const WaitPolicy& wait_policy() const override { return host_.wait_policy(); }
  ncclComm_t comm() const { return comm_; }

  std::unique_ptr<Work> all_reduce(BufferRef buffer, ReduceOp op) override {
    return all_reduce(buffer, buffer, op);
  }
  std::unique_ptr<Work> all_reduce(BufferRef in, BufferRef out, ReduceOp op) override {
    return start(OpKind::kAllReduce, in.bytes(), [&] {
      return ncclAllReduce(in.data, out.data, static_cast<size_t>(in.count), nccl_type(in.dtype),
                           nccl_op(op), comm_, stream_);
    });
  }
  std::unique_ptr<Work> reduce_scatter(BufferRef in, BufferRef out, std::span<const int64_t> counts,
                                       ReduceOp op) override {
    if (static_cast<int>(counts.size()) != size() ||
        std::accumulate(counts.begin(), counts.end(), int64_t{0}) != in.count ||
        out.count < counts[rank()]) {
      return refused(OpKind::kReduceScatter, "counts that do not match the group or the buffers");
    }
    return start(OpKind::kReduceScatter, in.bytes(), [&] {
      if (all_equal(counts)) {
        return ncclReduceScatter(in.data, out.data, static_cast<size_t>(counts.front()),
                                 nccl_type(in.dtype), nccl_op(op), comm_, stream_);
      }
      // Blocks of different sizes: one reduce to each rank.
      ncclGroupStart();
      int64_t offset = 0;
      for (int r = 0; r < static_cast<int>(counts.size()); ++r) {
        if (counts[r] > 0) {
          ncclReduce(at(in, offset), out.data, static_cast<size_t>(counts[r]), nccl_type(in.dtype),
                     nccl_op(op), r, comm_, stream_);
        }
        offset += counts[r];
      }
      return ncclGroupEnd();
    });
  }
  std::unique_ptr<Work> all_gather(BufferRef in, BufferRef out, const Blocks& blocks) override {
    if (static_cast<int>(blocks.counts.size()) != size() ||
        blocks.displacements.size() != blocks.counts.size() || in.count != blocks.counts[rank()]) {
      return refused(OpKind::kAllGather, "blocks that do not match the group or the buffers");
    }
    return start(OpKind::kAllGather, in.bytes(), [&] {
      const int64_t count = blocks.counts.front();
      bool consecutive = all_equal(blocks.counts);
      for (size_t r = 0; r < blocks.counts.size(); ++r) {
        consecutive = consecutive && blocks.displacements[r] == static_cast<int64_t>(r) * count;
      }
      if (consecutive) {
        return ncclAllGather(in.data, out.data, static_cast<size_t>(count), nccl_type(in.dtype),
                             comm_, stream_);
      }
      // Blocks of different sizes or places: one broadcast from each rank.
      ncclGroupStart();
      for (int r = 0; r < static_cast<int>(blocks.counts.size()); ++r) {
        if (blocks.counts[r] == 0) continue;
        ncclBroadcast(in.data, at(out, blocks.displacements[r]),
                      static_cast<size_t>(blocks.counts[r]), nccl_type(out.dtype), r, comm_,
                      stream_);
      }
      return ncclGroupEnd();
    });
  }
  std::unique_ptr<Work> broadcast(BufferRef buffer, int root) override {
    if (root < 0 || root >= size()) return refused(OpKind::kBroadcast, "a root outside the group");
    // Only the root hands its buffer to the transport.
    return start(OpKind::kBroadcast, rank() == root ? buffer.bytes() : 0, [&] {
      return ncclBroadcast(buffer.data, buffer.data, static_cast<size_t>(buffer.count),
                           nccl_type(buffer.dtype), root, comm_, stream_);
    });
  }
  std::unique_ptr<Work> all_to_all(BufferRef in, BufferRef out) override {
    const int64_t block = in.count / size();
    std::vector<int64_t> counts(size(), block);
    const Blocks blocks = Blocks::consecutive(counts);
    return all_to_all(in, blocks, out, blocks);
  }
  std::unique_ptr<Work> all_to_all(BufferRef in, const Blocks& sent, BufferRef out,
                                   const Blocks& received) override {
    if (static_cast<int>(sent.counts.size()) != size() ||
        static_cast<int>(received.counts.size()) != size() ||
        sent.displacements.size() != sent.counts.size() ||
        received.displacements.size() != received.counts.size()) {
      return refused(OpKind::kAllToAll, "blocks that do not match the group");
    }
    const int64_t others =
        std::accumulate(sent.counts.begin(), sent.counts.end(), int64_t{0}) - sent.counts[rank()];
    return start(OpKind::kAllToAll, in.bytes(), others * dtype_bytes(in.dtype), [&] {
      ncclGroupStart();
      for (int r = 0; r < size(); ++r) {
        if (sent.counts[r] > 0) {
          ncclSend(at(in, sent.displacements[r]), static_cast<size_t>(sent.counts[r]),
                   nccl_type(in.dtype), r, comm_, stream_);
        }
        if (received.counts[r] > 0) {
          ncclRecv(at(out, received.displacements[r]), static_cast<size_t>(received.counts[r]),
                   nccl_type(out.dtype), r, comm_, stream_);
        }
      }
      return ncclGroupEnd();
    });
  }
  // A lone NCCL send holds the stream until its receive runs, so two ranks
  // that each send and then receive (as MPI lets them) would wait for each
  // other forever: point-to-point goes through all_to_all here.
  std::unique_ptr<Work> send(BufferRef, int) override {
    return refused(OpKind::kSend, "a lone send (exchange through all_to_all)");
  }
  std::unique_ptr<Work> recv(BufferRef, int) override {
    return refused(OpKind::kRecv, "a lone receive (exchange through all_to_all)");
  }
  std::unique_ptr<Work> barrier() override {
    return start(OpKind::kBarrier, 0, [&] {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_);
    });
  }
  // `host` runs on a thread of CUDA's (cudaLaunchHostFunc), which must not
  // call CUDA: host memory only.
  std::unique_ptr<Work> then(std::function<void()> host) override {
    std::lock_guard lock(mutex_);
    if (broken_.load()) return finished(OpKind::kBarrier, error());
    auto* function = new std::function<void()>(std::move(host));
    if (cudaError_t e = cudaLaunchHostFunc(stream_, run_host_function, function);
        e != cudaSuccess) {
      delete function;
      return fail(OpKind::kBarrier, cuda_failure(e, "queueing a host function"));
    }
    return record_done(OpKind::kBarrier, 0, collectives_.load());
  }

  void* device_stream() override { return stream_; }

  core::StatusOr<std::unique_ptr<Communicator>> duplicate(std::string_view label) override {
    core::StatusOr<std::unique_ptr<Communicator>> host = host_.duplicate(label);
    if (!host.ok()) return host.status();
    return split_into(std::move(*host), 0);
  }
  core::StatusOr<std::unique_ptr<Communicator>> split(std::string_view label, int color) override {
    core::StatusOr<std::unique_ptr<Communicator>> host = host_.split(label, color);
    if (!host.ok()) return host.status();
    return split_into(std::move(*host), color);
  }

  // The bytes handed to NCCL and on the wire per operation; the seconds
  // are not measured (the operations run on the stream, not on a thread
  // of ours).
  CommStats stats() const override {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  int64_t collectives_started() const override { return collectives_.load(); }

 private:
  friend class NcclWork;

  // Queues `launch` (which returns NCCL's result) after the legacy default
  // stream's work so far (the backend's, unless its set_stream() chose
  // another), then the event that completes its Work. `wire`: the bytes to
  // peers, where wire_bytes()'s formula does not give them.
  template <typename Launch>
  std::unique_ptr<Work> start(OpKind kind, int64_t bytes, Launch launch) {
    return start(kind, bytes, wire_bytes(kind, bytes, size()), launch);
  }
  template <typename Launch>
  std::unique_ptr<Work> start(OpKind kind, int64_t bytes, int64_t wire, Launch launch) {
    std::lock_guard lock(mutex_);
    if (broken_.load()) return finished(kind, error());
    cudaError_t e = cudaEventRecord(ready_, cudaStreamLegacy);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, ready_, 0);
    if (e != cudaSuccess) return fail(kind, cuda_failure(e, "ordering after the default stream"));
    if (ncclResult_t result = launch(); result != ncclSuccess) {
      return fail(kind, nccl_failure(result, std::string(op_name(kind))));
    }
    CommStats::Op& op = stats_.ops[static_cast<int>(kind)];
    ++op.calls;
    op.bytes += bytes;
    op.wire_bytes += wire;
    return record_done(kind, bytes, ++collectives_);
  }
  // The Work of an operation queued, numbered `sequence` (1 for the first
  // collective, as MPI's are).
  std::unique_ptr<Work> record_done(OpKind kind, int64_t bytes, int64_t sequence) {
    cudaEvent_t done = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(done, stream_);
    if (e != cudaSuccess) {
      if (done != nullptr) cudaEventDestroy(done);
      // Queued, but nothing can tell when it is done: the communicator is
      // aborted rather than its buffers freed under it.
      return fail(kind, cuda_failure(e, "recording an event"));
    }
    return std::make_unique<NcclWork>(*this, done, kind, bytes, sequence, core::Status());
  }
  // What failed sticks: no operation starts after it, and the destructor
  // aborts (peers waiting in an operation this rank did not queue get
  // their own timeouts).
  std::unique_ptr<Work> fail(OpKind kind, core::Status status) {
    mark_broken(status);
    return finished(kind, std::move(status));
  }
  std::unique_ptr<Work> finished(OpKind kind, core::Status status) {
    return std::make_unique<NcclWork>(*this, nullptr, kind, 0, collectives_.load(),
                                      std::move(status));
  }
  // A call this communicator does not take: refused at once, nothing queued,
  // the communicator unharmed (as MPI's refuses bad arguments).
  std::unique_ptr<Work> refused(OpKind kind, std::string_view what) {
    return finished(kind,
                    core::Status(core::StatusCode::kInvalidArgument,
                                 fmt::format("NCCL {} on {}: {}", op_name(kind), axis_, what)));
  }
  void mark_broken(const core::Status& status) {
    std::lock_guard lock(error_mutex_);
    if (error_.ok()) error_ = status;
    broken_.store(true);
  }
  core::Status error() const {
    std::lock_guard lock(error_mutex_);
    return error_;
  }

  // A communicator over `host`'s ranks: NCCL's split of this one by color
  // (every rank of this group calls it, as it calls the host's split).
  core::StatusOr<std::unique_ptr<Communicator>> split_into(std::unique_ptr<Communicator> host,
                                                           int color) {
    ncclComm_t comm = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (ncclResult_t r = ncclCommSplit(comm_, color, rank(), &comm, nullptr); r != ncclSuccess) {
        return nccl_failure(r, "splitting a communicator");
      }
    }
    cudaStream_t stream = nullptr;
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      ncclCommDestroy(comm);
      return cuda_failure(e, "creating a stream");
    }
    Communicator& host_ref = *host;
    auto made = std::make_unique<NcclCommunicator>(host_ref, std::move(host), comm, stream);
    if (core::Status status = made->init(); !status.ok()) return status;
    return std::unique_ptr<Communicator>(std::move(made));
  }

  core::Status async_error() const {
    ncclResult_t async = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm_, &async); r != ncclSuccess) async = r;
    if (async == ncclSuccess || async == ncclInProgress) return {};
    return nccl_failure(async, "communicator");
  }

  Communicator& host_;
  std::unique_ptr<Communicator> owned_host_;
  const std::string axis_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  cudaEvent_t ready_ = nullptr;
  float* scratch_ = nullptr;
  mutable std::mutex mutex_;  // orders the operations' starts
  mutable std::mutex error_mutex_;
  core::Status error_;  // the first failure, which sticks
  std::atomic<bool> broken_{false};
  CommStats stats_;
  std::atomic<int64_t> collectives_{0};
};

core::Status NcclWork::wait(std::chrono::milliseconds timeout) {
  if (!failed_.ok()) return failed_;
  if (done_ == nullptr) return {};
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t state = cudaEventQuery(done_);
    if (state == cudaSuccess) return {};
    if (state != cudaErrorNotReady) {
      core::Status failed = cuda_failure(state, "waiting for an operation");
      owner_.mark_broken(failed);
      return failed;
    }
    if (core::Status status = owner_.async_error(); !status.ok()) {
      owner_.mark_broken(status);
      return status;
    }
    if (timeout.count() > 0 && std::chrono::steady_clock::now() - start > timeout) {
      std::string peers;
      for (int world_rank : owner_.world_ranks()) {
        peers += (peers.empty() ? "" : ", ") + std::to_string(world_rank);
      }
      // Still in flight: the destructor will abort rather than wait for it.
      core::Status late(
          core::StatusCode::kDeadlineExceeded,
          fmt::format("{} {} #{} of {} bytes over world ranks {} did not complete "
                      "within {} ms",
                      owner_.axis(), op_name(kind_), sequence_, bytes_, peers, timeout.count()));
      owner_.mark_broken(late);
      return late;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

core::Status NcclWork::wait() {
  const WaitPolicy& policy = owner_.wait_policy();
  core::Status status = wait(policy.timeout);
  if (status.code() == core::StatusCode::kDeadlineExceeded && policy.on_deadline) {
    policy.on_deadline(status,
                       HangReport{std::string(owner_.axis()), sequence_, owner_.world_ranks()});
  }
  return status;
}

}  // namespace

bool nccl_built() { return true; }

core::StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& host) {
  // Rank 0's id reaches the others over the host communicator.
  ncclUniqueId id{};
  if (host.rank() == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return nccl_failure(r, "making a unique id");
    }
  }
  const BufferRef id_bytes{&id, static_cast<int64_t>(sizeof(id)), DType::kU8};
  if (core::Status sent = host.broadcast(id_bytes, 0)->wait(); !sent.ok()) {
    return sent.with_context("sending NCCL's unique id");
  }
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = ncclCommInitRank(&comm, host.size(), id, host.rank()); r != ncclSuccess) {
    return nccl_failure(r, "starting a communicator");
  }
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    ncclCommDestroy(comm);
    return cuda_failure(e, "creating a stream");
  }
  auto made = std::make_unique<NcclCommunicator>(host, nullptr, comm, stream);
  if (core::Status status = made->init(); !status.ok()) return status;
  return std::unique_ptr<Communicator>(std::move(made));
}

}  // namespace dslaunch::worker::comm
