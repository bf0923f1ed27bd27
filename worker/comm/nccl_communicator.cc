// The NCCL communicator (--config=cuda): the Communicator interface over
// buffers in GPU memory, each operation queued on a CUDA stream of the
// communicator's own and completed through a CUDA event.
#include "worker/comm/nccl_communicator.h"

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
  NcclWork(const NcclCommunicator& owner, cudaEvent_t done, int64_t sequence, core::Status failed)
      : owner_(owner), done_(done), sequence_(sequence), failed_(std::move(failed)) {}
  ~NcclWork() override {
    if (done_ != nullptr) cudaEventDestroy(done_);
  }
  core::Status wait(std::chrono::milliseconds timeout) override;
  core::Status wait() override;
  bool done() const override {
    return !failed_.ok() || done_ == nullptr || cudaEventQuery(done_) == cudaSuccess;
  }

 private:
  const NcclCommunicator& owner_;
  cudaEvent_t done_;
  int64_t sequence_;
  core::Status failed_;
};

class NcclCommunicator final : public Communicator {
 public:
  // `host` alone, or `owned` (a duplicate or split of another's host, kept).
  NcclCommunicator(Communicator& host, std::unique_ptr<Communicator> owned, ncclComm_t comm,
                   cudaStream_t stream)
      : host_(host), owned_host_(std::move(owned)), comm_(comm), stream_(stream) {}
  ~NcclCommunicator() override {
    if (error_.ok()) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);  // a peer may never come: destroying would wait for it
    }
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (scratch_ != nullptr) cudaFree(scratch_);
    cudaStreamDestroy(stream_);
  }

  core::Status init() {
    if (cudaError_t e = cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming); e != cudaSuccess) {
      return cuda_failure(e, "creating an event");
    }
    if (cudaError_t e = cudaMalloc(&scratch_, sizeof(float)); e != cudaSuccess) {
      return cuda_failure(e, "allocating the barrier's float");
    }
    return {};
  }

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string_view axis() const override { return host_.axis(); }
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
  std::unique_ptr<Work> reduce_scatter(BufferRef in, BufferRef out,
                                       std::span<const int64_t> counts, ReduceOp op) override {
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
    return start(OpKind::kBroadcast, buffer.bytes(), [&] {
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
    const int64_t others =
        std::accumulate(sent.counts.begin(), sent.counts.end(), int64_t{0}) - sent.counts[rank()];
    return start(OpKind::kAllToAll, others * dtype_bytes(in.dtype), [&] {
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
  std::unique_ptr<Work> send(BufferRef buffer, int peer) override {
    return start(OpKind::kSend, buffer.bytes(), [&] {
      return ncclSend(buffer.data, static_cast<size_t>(buffer.count), nccl_type(buffer.dtype),
                      peer, comm_, stream_);
    });
  }
  std::unique_ptr<Work> recv(BufferRef buffer, int peer) override {
    return start(OpKind::kRecv, 0, [&] {
      return ncclRecv(buffer.data, static_cast<size_t>(buffer.count), nccl_type(buffer.dtype),
                      peer, comm_, stream_);
    });
  }
  std::unique_ptr<Work> barrier() override {
    return start(OpKind::kBarrier, 0, [&] {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_);
    });
  }
  std::unique_ptr<Work> then(std::function<void()> host) override {
    std::lock_guard lock(mutex_);
    auto* function = new std::function<void()>(std::move(host));
    if (cudaError_t e = cudaLaunchHostFunc(stream_, run_host_function, function); e != cudaSuccess) {
      delete function;
      return finished(cuda_failure(e, "queueing a host function"));
    }
    return record_done(collectives_);
  }

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
  int64_t collectives_started() const override {
    std::lock_guard lock(mutex_);
    return collectives_;
  }

 private:
  friend class NcclWork;

  // Queues `launch` (which returns NCCL's result) after the default
  // stream's work so far, then the event that completes its Work.
  template <typename Launch>
  std::unique_ptr<Work> start(OpKind kind, int64_t bytes, Launch launch) {
    std::lock_guard lock(mutex_);
    if (!error_.ok()) return finished(error_);
    if (cudaError_t e = cudaEventRecord(ready_, cudaStreamLegacy); e != cudaSuccess) {
      return finished(cuda_failure(e, "ordering after the default stream"));
    }
    cudaStreamWaitEvent(stream_, ready_, 0);
    if (ncclResult_t result = launch(); result != ncclSuccess) {
      error_ = nccl_failure(result, std::string(op_name(kind)));
      return finished(error_);
    }
    CommStats::Op& op = stats_.ops[static_cast<int>(kind)];
    ++op.calls;
    op.bytes += bytes;
    op.wire_bytes += wire_bytes(kind, bytes, size());
    const int64_t sequence = collectives_;
    if (kind != OpKind::kSend && kind != OpKind::kRecv) ++collectives_;
    return record_done(sequence);
  }
  std::unique_ptr<Work> record_done(int64_t sequence) {
    cudaEvent_t done = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(done, stream_);
    if (e != cudaSuccess) {
      if (done != nullptr) cudaEventDestroy(done);
      return finished(cuda_failure(e, "recording an event"));
    }
    return std::make_unique<NcclWork>(*this, done, sequence, core::Status());
  }
  std::unique_ptr<Work> finished(core::Status status) {
    return std::make_unique<NcclWork>(*this, nullptr, collectives_, std::move(status));
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
  ncclComm_t comm_;
  cudaStream_t stream_;
  cudaEvent_t ready_ = nullptr;
  float* scratch_ = nullptr;
  mutable std::mutex mutex_;
  core::Status error_;  // sticks: no operation starts after a failed one
  CommStats stats_;
  int64_t collectives_ = 0;
};

core::Status NcclWork::wait(std::chrono::milliseconds timeout) {
  if (!failed_.ok()) return failed_;
  if (done_ == nullptr) return {};
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t state = cudaEventQuery(done_);
    if (state == cudaSuccess) return {};
    if (state != cudaErrorNotReady) return cuda_failure(state, "waiting for an operation");
    if (core::Status status = owner_.async_error(); !status.ok()) return status;
    if (timeout.count() > 0 && std::chrono::steady_clock::now() - start > timeout) {
      return core::Status(
          core::StatusCode::kDeadlineExceeded,
          fmt::format("NCCL operation {} on {} ({} ranks) not done after {} ms", sequence_,
                      owner_.axis(), owner_.size(), timeout.count()));
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
