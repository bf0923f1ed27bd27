#include "worker/comm/mpi_communicator.h"

#include <climits>
#include <utility>

#include <fmt/format.h>

#include "core/byte_size_text.h"
#include "worker/comm/mpi_status.h"

namespace dslaunch::worker::comm {
namespace {

// 16-bit floats travel as opaque 16-bit words: MPI has no type for them and
// they are never reduced here (16-bit training reduces in fp32).
MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kBF16:
    case DType::kF16:
      return MPI_UINT16_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kU8:
      return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_OP_NULL;
}

// MPI counts are ints.
core::Status check_count(int64_t count, const char* what) {
  if (count < 0 || count > INT_MAX) {
    return core::invalid_argument(fmt::format(
        "{} of {} elements: MPI counts elements in an int (at most {}); split it", what, count,
        INT_MAX));
  }
  return {};
}

core::Status check_reducible(DType dtype) {
  if (dtype == DType::kBF16 || dtype == DType::kF16) {
    return core::invalid_argument(fmt::format(
        "reducing {} is not supported: reduce in fp32 and convert", dtype_name(dtype)));
  }
  return {};
}

std::vector<int> to_ints(std::span<const int64_t> values) {
  return std::vector<int>(values.begin(), values.end());
}

}  // namespace

class MpiCommunicator::MpiWork final : public Work {
 public:
  MpiWork(MpiCommunicator& owner, std::shared_ptr<MpiOpState> state, std::string description,
          int64_t sequence)
      : owner_(owner),
        state_(std::move(state)),
        description_(std::move(description)),
        sequence_(sequence) {}

  core::Status wait(std::chrono::milliseconds timeout) override {
    if (!owner_.stream_->wait(*state_, timeout)) {
      return core::deadline_exceeded(fmt::format(
          "{} did not complete within {} s", description_,
          std::chrono::duration<double>(timeout).count()));
    }
    const core::Status& status = state_->status;  // done: no longer written
    if (status.ok()) return status;
    // A call refused for its arguments never reached the transport: only
    // transport failures break the communicator.
    if (status.code() != core::StatusCode::kInvalidArgument) {
      owner_.note_failure(status.with_context(description_));
    }
    return status.with_context(description_);
  }
  core::Status wait() override {
    core::Status status = wait(owner_.policy_.timeout);
    if (status.code() == core::StatusCode::kDeadlineExceeded && owner_.policy_.on_deadline) {
      owner_.policy_.on_deadline(status,
                                 HangReport{owner_.axis_, sequence_, owner_.world_ranks_});
    }
    return status;
  }
  bool done() const override { return owner_.stream_->done(*state_); }

 private:
  MpiCommunicator& owner_;
  std::shared_ptr<MpiOpState> state_;
  std::string description_;
  int64_t sequence_;  // 0 for a refused call
};

MpiCommunicator::MpiCommunicator(MpiTransport& transport, MPI_Comm comm, std::string axis,
                                 std::vector<int> world_ranks, WaitPolicy policy,
                                 std::chrono::microseconds poll_interval)
    : transport_(transport),
      stream_(std::make_unique<MpiStream>(transport, poll_interval)),
      poll_interval_(poll_interval),
      comm_(comm),
      axis_(std::move(axis)),
      world_ranks_(std::move(world_ranks)),
      policy_(std::move(policy)) {
  MPI_Comm_rank(comm_, &rank_);
  transport_.add(this);
}

MpiCommunicator::~MpiCommunicator() {
  transport_.remove(this);
  stream_->call([this] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    return finalized || comm_ == MPI_COMM_NULL ? MPI_SUCCESS : MPI_Comm_free(&comm_);
  });
}

std::string MpiCommunicator::describe(OpKind kind, int64_t sequence, int64_t bytes,
                                      int peer) const {
  // A refused call (sequence 0) has no place in the sequence.
  std::string text = sequence > 0 ? fmt::format("{} {} #{}", axis_, op_name(kind), sequence)
                                  : fmt::format("{} {} (refused)", axis_, op_name(kind));
  text += fmt::format(" of {} over world ranks {}", core::byte_size_text(bytes),
                      fmt::join(world_ranks_, ", "));
  if (peer >= 0) text += fmt::format(" (peer: world rank {})", world_ranks_[peer]);
  return text;
}

void MpiCommunicator::note_failure(const core::Status& status) {
  std::lock_guard lock(mutex_);
  if (broken_.ok()) broken_ = status;
}

std::unique_ptr<Work> MpiCommunicator::launch(OpKind kind, int64_t bytes, int peer,
                                              core::Status invalid, MpiStream::Blocking call,
                                              std::optional<int64_t> wire) {
  // Timed on the communication thread, where the call runs: the stats'
  // latency. The communicator outlives its queued operations.
  MpiStream::Blocking timed = [this, kind, call = std::move(call)] {
    const auto start = std::chrono::steady_clock::now();
    const int result = call();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard lock(mutex_);
    stats_.ops[static_cast<int>(kind)].seconds += seconds;
    return result;
  };
  return queue(
      kind, bytes, peer, std::move(invalid),
      [&](std::shared_ptr<MpiOpState> state) {
        stream_->submit_blocking(std::move(timed), std::move(state));
      },
      wire);
}

std::unique_ptr<Work> MpiCommunicator::launch_p2p(OpKind kind, int64_t bytes, int peer,
                                                  core::Status invalid, MpiStream::Start start) {
  return queue(kind, bytes, peer, std::move(invalid),
               [&](std::shared_ptr<MpiOpState> state) {
                 stream_->submit(std::move(start), std::move(state));
               });
}

std::unique_ptr<Work> MpiCommunicator::queue(
    OpKind kind, int64_t bytes, int peer, core::Status invalid,
    const std::function<void(std::shared_ptr<MpiOpState>)>& submit, std::optional<int64_t> wire) {
  stream_->stall_point();
  auto state = std::make_shared<MpiOpState>();
  std::lock_guard lock(mutex_);
  const bool collective = kind != OpKind::kSend && kind != OpKind::kRecv;
  const int64_t sequence = !invalid.ok() ? 0
                           : collective  ? collectives_.load() + 1
                                         : stats_.ops[static_cast<int>(kind)].calls + 1;
  auto work = std::make_unique<MpiWork>(*this, state, describe(kind, sequence, bytes, peer),
                                        collective ? sequence : 0);
  if (!invalid.ok() || !broken_.ok()) {
    state->status = invalid.ok() ? broken_ : std::move(invalid);
    state->done = true;
    return work;
  }
  CommStats::Op& op = stats_.ops[static_cast<int>(kind)];
  ++op.calls;
  op.bytes += bytes;
  const int64_t sent = wire.value_or(wire_bytes(kind, bytes, size()));
  op.wire_bytes += sent;
  transport_.count_wire_bytes(axis_, sent);
  if (collective) collectives_.fetch_add(1);
  // Under mutex_, so operations are queued in the order these calls return.
  submit(std::move(state));
  return work;
}

std::unique_ptr<Work> MpiCommunicator::all_reduce(BufferRef buffer, ReduceOp op) {
  core::Status invalid = check_count(buffer.count, "all_reduce");
  if (invalid.ok()) invalid = check_reducible(buffer.dtype);
  return launch(OpKind::kAllReduce, buffer.bytes(), -1, std::move(invalid),
                [=, comm = comm_] {
                  return MPI_Allreduce(MPI_IN_PLACE, buffer.data, static_cast<int>(buffer.count),
                                       mpi_type(buffer.dtype), mpi_op(op), comm);
                });
}

std::unique_ptr<Work> MpiCommunicator::all_reduce(BufferRef in, BufferRef out, ReduceOp op) {
  core::Status invalid = check_count(in.count, "all_reduce");
  if (invalid.ok()) invalid = check_reducible(in.dtype);
  if (invalid.ok() && (in.count != out.count || in.dtype != out.dtype)) {
    invalid = core::invalid_argument(fmt::format(
        "all_reduce: {} elements in, {} out", in.count, out.count));
  }
  return launch(OpKind::kAllReduce, in.bytes(), -1, std::move(invalid),
                [=, comm = comm_] {
                  // The same buffer twice is the in-place form (MPI forbids aliasing).
                  return MPI_Allreduce(in.data == out.data ? MPI_IN_PLACE : in.data, out.data,
                                       static_cast<int>(in.count), mpi_type(in.dtype), mpi_op(op),
                                       comm);
                });
}

std::unique_ptr<Work> MpiCommunicator::reduce_scatter(BufferRef in, BufferRef out,
                                                      std::span<const int64_t> counts,
                                                      ReduceOp op) {
  core::Status invalid = check_reducible(in.dtype);
  int64_t total = 0;
  for (const int64_t count : counts) {
    if (invalid.ok()) invalid = check_count(count, "a reduce_scatter block");
    total += count;
  }
  if (invalid.ok() && static_cast<int>(counts.size()) != size()) {
    invalid = core::invalid_argument(fmt::format("reduce_scatter: {} block counts for {} ranks",
                                                 counts.size(), size()));
  }
  if (invalid.ok() && (total > in.count || counts[rank_] > out.count || in.dtype != out.dtype)) {
    invalid = core::invalid_argument(fmt::format(
        "reduce_scatter: blocks of {} elements in all, {} here, do not fit buffers of {} and {}",
        total, counts[rank_], in.count, out.count));
  }
  std::vector<int> ints = invalid.ok() ? to_ints(counts) : std::vector<int>();
  return launch(OpKind::kReduceScatter, total * dtype_bytes(in.dtype), -1, std::move(invalid),
                [=, comm = comm_, counts = std::move(ints)] {
                  return MPI_Reduce_scatter(in.data, out.data, counts.data(), mpi_type(in.dtype),
                                            mpi_op(op), comm);
                });
}

std::unique_ptr<Work> MpiCommunicator::all_gather(BufferRef in, BufferRef out,
                                                  const Blocks& blocks) {
  core::Status invalid;
  if (static_cast<int>(blocks.counts.size()) != size() ||
      blocks.displacements.size() != blocks.counts.size()) {
    invalid = core::invalid_argument(fmt::format(
        "all_gather: {} block counts and {} displacements for {} ranks", blocks.counts.size(),
        blocks.displacements.size(), size()));
  }
  for (size_t r = 0; invalid.ok() && r < blocks.counts.size(); ++r) {
    invalid = check_count(blocks.counts[r], "an all_gather block");
    if (invalid.ok()) invalid = check_count(blocks.displacements[r], "an all_gather displacement");
    if (invalid.ok() && blocks.displacements[r] + blocks.counts[r] > out.count) {
      invalid = core::invalid_argument(fmt::format(
          "all_gather: block {} ends at {}, past the output's {} elements", r,
          blocks.displacements[r] + blocks.counts[r], out.count));
    }
  }
  if (invalid.ok() && (in.count != blocks.counts[rank_] || in.dtype != out.dtype)) {
    invalid = core::invalid_argument(fmt::format(
        "all_gather: this rank sends {} elements, its block holds {}", in.count,
        blocks.counts[rank_]));
  }
  // This rank's block already in place in `out`: MPI_IN_PLACE, as MPI forbids
  // aliased send and receive buffers.
  const bool in_place =
      invalid.ok() &&
      in.data == static_cast<char*>(out.data) + blocks.displacements[rank_] * dtype_bytes(out.dtype);
  std::vector<int> counts = invalid.ok() ? to_ints(blocks.counts) : std::vector<int>();
  std::vector<int> displacements =
      invalid.ok() ? to_ints(blocks.displacements) : std::vector<int>();
  return launch(
      OpKind::kAllGather, in.bytes(), -1, std::move(invalid),
      [=, comm = comm_, counts = std::move(counts),
       displacements = std::move(displacements)] {
        const MPI_Datatype type = mpi_type(out.dtype);
        return MPI_Allgatherv(in_place ? MPI_IN_PLACE : in.data, static_cast<int>(in.count), type,
                              out.data, counts.data(), displacements.data(), type, comm);
      });
}

std::unique_ptr<Work> MpiCommunicator::broadcast(BufferRef buffer, int root) {
  core::Status invalid = check_count(buffer.count, "broadcast");
  if (invalid.ok() && (root < 0 || root >= size())) {
    invalid = core::invalid_argument(fmt::format("broadcast from rank {} of {}", root, size()));
  }
  return launch(OpKind::kBroadcast, rank_ == root ? buffer.bytes() : 0, -1, std::move(invalid),
                [=, comm = comm_] {
                  return MPI_Bcast(buffer.data, static_cast<int>(buffer.count),
                                   mpi_type(buffer.dtype), root, comm);
                });
}

std::unique_ptr<Work> MpiCommunicator::all_to_all(BufferRef in, BufferRef out) {
  core::Status invalid;
  if (in.count != out.count || in.count % size() != 0 || in.dtype != out.dtype) {
    invalid = core::invalid_argument(fmt::format(
        "all_to_all: buffers of {} and {} elements for {} equal blocks", in.count, out.count,
        size()));
  }
  const int64_t block = in.count / size();
  if (invalid.ok()) invalid = check_count(block, "an all_to_all block");
  return launch(OpKind::kAllToAll, in.bytes(), -1, std::move(invalid),
                [=, comm = comm_] {
                  const MPI_Datatype type = mpi_type(in.dtype);
                  return MPI_Alltoall(in.data, static_cast<int>(block), type, out.data,
                                      static_cast<int>(block), type, comm);
                });
}

std::unique_ptr<Work> MpiCommunicator::all_to_all(BufferRef in, const Blocks& sent, BufferRef out,
                                                  const Blocks& received) {
  core::Status invalid;
  const auto check_blocks = [&](const Blocks& blocks, const BufferRef& buffer, const char* what) {
    if (!invalid.ok()) return;
    if (static_cast<int>(blocks.counts.size()) != size() ||
        blocks.displacements.size() != blocks.counts.size()) {
      invalid = core::invalid_argument(
          fmt::format("all_to_all: {} {} block counts and {} displacements for {} ranks",
                      blocks.counts.size(), what, blocks.displacements.size(), size()));
      return;
    }
    for (size_t r = 0; invalid.ok() && r < blocks.counts.size(); ++r) {
      invalid = check_count(blocks.counts[r], "an all_to_all block");
      if (invalid.ok())
        invalid = check_count(blocks.displacements[r], "an all_to_all displacement");
      if (invalid.ok() && blocks.displacements[r] + blocks.counts[r] > buffer.count) {
        invalid = core::invalid_argument(
            fmt::format("all_to_all: a {} block ends at {}, past the buffer's {} elements", what,
                        blocks.displacements[r] + blocks.counts[r], buffer.count));
      }
    }
  };
  if (in.dtype != out.dtype) invalid = core::invalid_argument("all_to_all: buffers of two types");
  check_blocks(sent, in, "sent");
  check_blocks(received, out, "received");
  int64_t to_peers = 0;
  if (invalid.ok()) {
    for (int r = 0; r < size(); ++r) {
      if (r != rank_) to_peers += sent.counts[r] * dtype_bytes(in.dtype);
    }
  }
  std::vector<int> send_counts = invalid.ok() ? to_ints(sent.counts) : std::vector<int>();
  std::vector<int> send_displacements =
      invalid.ok() ? to_ints(sent.displacements) : std::vector<int>();
  std::vector<int> receive_counts = invalid.ok() ? to_ints(received.counts) : std::vector<int>();
  std::vector<int> receive_displacements =
      invalid.ok() ? to_ints(received.displacements) : std::vector<int>();
  return launch(
      OpKind::kAllToAll, in.bytes(), -1, std::move(invalid),
      [=, comm = comm_, send_counts = std::move(send_counts),
       send_displacements = std::move(send_displacements),
       receive_counts = std::move(receive_counts),
       receive_displacements = std::move(receive_displacements)] {
        const MPI_Datatype type = mpi_type(in.dtype);
        return MPI_Alltoallv(in.data, send_counts.data(), send_displacements.data(), type, out.data,
                             receive_counts.data(), receive_displacements.data(), type, comm);
      },
      to_peers);
}

std::unique_ptr<Work> MpiCommunicator::send(BufferRef buffer, int peer) {
  core::Status invalid = check_count(buffer.count, "send");
  if (invalid.ok() && (peer < 0 || peer >= size() || peer == rank_)) {
    invalid = core::invalid_argument(fmt::format("send to rank {} of {}", peer, size()));
  }
  return launch_p2p(OpKind::kSend, buffer.bytes(), invalid.ok() ? peer : -1, std::move(invalid),
                [=, comm = comm_](MPI_Request* request) {
                  return MPI_Isend(buffer.data, static_cast<int>(buffer.count),
                                   mpi_type(buffer.dtype), peer, 0, comm, request);
                });
}

std::unique_ptr<Work> MpiCommunicator::recv(BufferRef buffer, int peer) {
  core::Status invalid = check_count(buffer.count, "recv");
  if (invalid.ok() && (peer < 0 || peer >= size() || peer == rank_)) {
    invalid = core::invalid_argument(fmt::format("recv from rank {} of {}", peer, size()));
  }
  return launch_p2p(OpKind::kRecv, 0, invalid.ok() ? peer : -1, std::move(invalid),
                [=, comm = comm_](MPI_Request* request) {
                  return MPI_Irecv(buffer.data, static_cast<int>(buffer.count),
                                   mpi_type(buffer.dtype), peer, 0, comm, request);
                });
}

std::unique_ptr<Work> MpiCommunicator::barrier() {
  return launch(OpKind::kBarrier, 0, -1, {}, [comm = comm_] { return MPI_Barrier(comm); });
}

core::StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::duplicate(std::string_view label) {
  stream_->stall_point();
  MPI_Comm copy = MPI_COMM_NULL;
  // In this communicator's queue: MPI_Comm_dup is collective over it.
  const int code = stream_->call([&] {
    int rc = MPI_Comm_dup(comm_, &copy);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(copy, MPI_ERRORS_RETURN);
    return rc;
  });
  if (code != MPI_SUCCESS) return from_mpi(code, "MPI_Comm_dup").with_context(axis_);
  return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(
      transport_, copy, axis_ + "/" + std::string(label), world_ranks_, policy_, poll_interval_));
}

core::StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::split(std::string_view label,
                                                                     int color) {
  stream_->stall_point();
  MPI_Comm part = MPI_COMM_NULL;
  std::vector<int> members;  // the new group's ranks, as ranks of this one
  const int code = stream_->call([&] {
    int rc = MPI_Comm_split(comm_, color, rank_, &part);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(part, MPI_ERRORS_RETURN);
    MPI_Group ours = MPI_GROUP_NULL, theirs = MPI_GROUP_NULL;
    if (rc == MPI_SUCCESS) rc = MPI_Comm_group(comm_, &ours);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_group(part, &theirs);
    int size = 0;
    if (rc == MPI_SUCCESS) rc = MPI_Group_size(theirs, &size);
    std::vector<int> ranks(size);
    for (int i = 0; i < size; ++i) ranks[i] = i;
    members.assign(size, MPI_UNDEFINED);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Group_translate_ranks(theirs, size, ranks.data(), ours, members.data());
    }
    if (theirs != MPI_GROUP_NULL) MPI_Group_free(&theirs);
    if (ours != MPI_GROUP_NULL) MPI_Group_free(&ours);
    if (rc != MPI_SUCCESS && part != MPI_COMM_NULL) MPI_Comm_free(&part);
    return rc;
  });
  if (code != MPI_SUCCESS) return from_mpi(code, "MPI_Comm_split").with_context(axis_);
  std::vector<int> world_ranks;
  for (const int member : members) world_ranks.push_back(world_ranks_[member]);
  return std::unique_ptr<Communicator>(
      std::make_unique<MpiCommunicator>(transport_, part, axis_ + "/" + std::string(label),
                                        std::move(world_ranks), policy_, poll_interval_));
}

std::unique_ptr<Work> MpiCommunicator::then(std::function<void()> host) {
  auto state = std::make_shared<MpiOpState>();
  std::lock_guard lock(mutex_);
  auto work = std::make_unique<MpiWork>(*this, state, axis_ + " host function", 0);
  stream_->submit_blocking(
      [host = std::move(host)] {
        host();
        return MPI_SUCCESS;
      },
      std::move(state));
  return work;
}

CommStats MpiCommunicator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

int64_t MpiCommunicator::collectives_started() const { return collectives_.load(); }

}  // namespace dslaunch::worker::comm
