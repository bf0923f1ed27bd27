#include "worker/comm/host_staged_communicator.h"

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dslaunch::worker::comm {
namespace {

// An operation that completed before its call returned.
class CompletedWork final : public Work {
 public:
  explicit CompletedWork(core::Status status) : status_(std::move(status)) {}
  core::Status wait(std::chrono::milliseconds) override { return status_; }
  core::Status wait() override { return status_; }
  bool done() const override { return true; }

 private:
  core::Status status_;
};

std::unique_ptr<Work> completed(core::Status status = {}) {
  return std::make_unique<CompletedWork>(std::move(status));
}

class HostStagedCommunicator final : public Communicator {
 public:
  HostStagedCommunicator(Communicator& host, kernels::Backend& device,
                         std::unique_ptr<Communicator> owned = nullptr)
      : host_(host), device_(device), owned_(std::move(owned)) {}

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string_view axis() const override { return host_.axis(); }
  const std::vector<int>& world_ranks() const override { return host_.world_ranks(); }
  std::chrono::milliseconds timeout() const override { return host_.timeout(); }
  const WaitPolicy& wait_policy() const override { return host_.wait_policy(); }

  std::unique_ptr<Work> all_reduce(BufferRef buffer, ReduceOp op) override {
    std::lock_guard lock(mutex_);
    const BufferRef staged = download(buffer, sent_);
    return finish(host_.all_reduce(staged, op), [&] { upload(buffer, staged); });
  }
  std::unique_ptr<Work> all_reduce(BufferRef in, BufferRef out, ReduceOp op) override {
    std::lock_guard lock(mutex_);
    const BufferRef staged_in = download(in, sent_);
    const BufferRef staged_out = staging(out, received_);
    return finish(host_.all_reduce(staged_in, staged_out, op), [&] { upload(out, staged_out); });
  }
  std::unique_ptr<Work> reduce_scatter(BufferRef in, BufferRef out, std::span<const int64_t> counts,
                                       ReduceOp op) override {
    std::lock_guard lock(mutex_);
    const BufferRef staged_in = download(in, sent_);
    // Only this rank's block lands.
    const size_t rank = static_cast<size_t>(host_.rank());
    const BufferRef own = {out.data, rank < counts.size() ? counts[rank] : 0, out.dtype};
    const BufferRef staged_out = staging(own, received_);
    return finish(host_.reduce_scatter(staged_in, staged_out, counts, op),
                  [&] { upload(own, staged_out); });
  }
  std::unique_ptr<Work> all_gather(BufferRef in, BufferRef out, const Blocks& blocks) override {
    std::lock_guard lock(mutex_);
    // `in` may be this rank's block of `out`: it is read before anything lands.
    const BufferRef staged_in = download(in, sent_);
    const Packed packed = pack(out, blocks);
    return finish(host_.all_gather(staged_in, packed.buffer, packed.blocks),
                  [&] { unpack(out, packed, blocks); });
  }
  std::unique_ptr<Work> broadcast(BufferRef buffer, int root) override {
    std::lock_guard lock(mutex_);
    const BufferRef staged = download(buffer, sent_);
    return finish(host_.broadcast(staged, root), [&] { upload(buffer, staged); });
  }
  std::unique_ptr<Work> all_to_all(BufferRef in, BufferRef out) override {
    std::lock_guard lock(mutex_);
    const BufferRef staged_in = download(in, sent_);
    const BufferRef staged_out = staging(out, received_);
    return finish(host_.all_to_all(staged_in, staged_out), [&] { upload(out, staged_out); });
  }
  std::unique_ptr<Work> all_to_all(BufferRef in, const Blocks& sent, BufferRef out,
                                   const Blocks& received) override {
    std::lock_guard lock(mutex_);
    const BufferRef staged_in = download(in, sent_);
    const Packed packed = pack(out, received);
    return finish(host_.all_to_all(staged_in, sent, packed.buffer, packed.blocks),
                  [&] { unpack(out, packed, received); });
  }
  std::unique_ptr<Work> send(BufferRef, int) override { return refused("send"); }
  std::unique_ptr<Work> recv(BufferRef, int) override { return refused("recv"); }
  std::unique_ptr<Work> barrier() override {
    std::lock_guard lock(mutex_);
    return completed(host_.barrier()->wait());
  }
  // Every operation before it is complete: it runs now.
  std::unique_ptr<Work> then(std::function<void()> host) override {
    std::lock_guard lock(mutex_);
    host();
    return completed();
  }

  core::StatusOr<std::unique_ptr<Communicator>> duplicate(std::string_view label) override {
    return wrap(host_.duplicate(label));
  }
  core::StatusOr<std::unique_ptr<Communicator>> split(std::string_view label, int color) override {
    return wrap(host_.split(label, color));
  }

  CommStats stats() const override { return host_.stats(); }
  int64_t collectives_started() const override { return host_.collectives_started(); }

 private:
  core::StatusOr<std::unique_ptr<Communicator>> wrap(
      core::StatusOr<std::unique_ptr<Communicator>> made) {
    if (!made.ok()) return made.status();
    Communicator& inner = **made;
    return std::unique_ptr<Communicator>(
        std::make_unique<HostStagedCommunicator>(inner, device_, std::move(*made)));
  }

  std::unique_ptr<Work> refused(std::string_view what) const {
    return completed(core::Status(
        core::StatusCode::kFailedPrecondition,
        "a lone " + std::string(what) + " on " + std::string(host_.axis()) +
            " through host staging would block its rank until the peer's matching call: "
            "exchange through all_to_all"));
  }

  // Host memory of `buffer`'s size in `bytes`, holding nothing yet.
  static BufferRef staging(const BufferRef& buffer, std::vector<std::byte>& bytes) {
    bytes.resize(static_cast<size_t>(buffer.bytes()));
    return {bytes.data(), buffer.count, buffer.dtype};
  }
  BufferRef download(const BufferRef& buffer, std::vector<std::byte>& bytes) {
    const BufferRef staged = staging(buffer, bytes);
    if (buffer.bytes() > 0) device_.copy_device_to_host(staged.data, buffer.data, buffer.bytes());
    return staged;
  }
  void upload(const BufferRef& buffer, const BufferRef& staged) {
    if (buffer.bytes() > 0) device_.copy_host_to_device(buffer.data, staged.data, buffer.bytes());
  }
  // The blocks an operation writes into `out`, received back to back in
  // host memory: staging only what arrives, not the span `out` covers.
  struct Packed {
    BufferRef buffer;
    Blocks blocks;
  };
  Packed pack(const BufferRef& out, const Blocks& blocks) {
    Packed packed;
    packed.blocks = Blocks::consecutive(blocks.counts);
    int64_t total = 0;
    for (const int64_t count : blocks.counts) total += std::max<int64_t>(count, 0);
    packed.buffer = staging({out.data, total, out.dtype}, received_);
    return packed;
  }
  void unpack(const BufferRef& out, const Packed& packed, const Blocks& blocks) {
    const int64_t element = dtype_bytes(out.dtype);
    for (size_t r = 0; r < blocks.counts.size(); ++r) {
      const int64_t bytes = blocks.counts[r] * element;
      if (bytes <= 0) continue;
      device_.copy_host_to_device(
          static_cast<std::byte*>(out.data) + blocks.displacements[r] * element,
          static_cast<std::byte*>(packed.buffer.data) + packed.blocks.displacements[r] * element,
          bytes);
    }
  }
  // Waits for the host's operation and, when it succeeded, lands what it
  // received.
  template <typename Land>
  std::unique_ptr<Work> finish(std::unique_ptr<Work> work, Land land) {
    core::Status status = work->wait();
    if (status.ok()) land();
    return completed(std::move(status));
  }

  Communicator& host_;
  kernels::Backend& device_;
  std::unique_ptr<Communicator> owned_;  // host_ when made by duplicate() or split()
  std::mutex mutex_;
  std::vector<std::byte> sent_;
  std::vector<std::byte> received_;
};

}  // namespace

std::unique_ptr<Communicator> make_host_staged_communicator(Communicator& host,
                                                            kernels::Backend& device) {
  return std::make_unique<HostStagedCommunicator>(host, device);
}

}  // namespace dslaunch::worker::comm
