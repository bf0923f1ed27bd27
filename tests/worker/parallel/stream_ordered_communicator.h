#pragma once

// NCCL's way of running collectives, on the CPU: a communicator over the
// deferred emulator's memory (kernels/simt/emulated_backend.h,
// StreamOrder::kDeferred) whose operations are queued on a stream of its
// own, each after the default stream's work queued before it, and run
// through an MPI communicator when the stream gets there. Its Work is done
// when the stream has run it. Code that overlaps its collectives with other
// work through device_stream() (DeviceGradientReducer) is tested on it:
// a missing wait reads what is not yet written, a missing synchronize uses
// what is not yet reduced.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kernels/backend.h"
#include "kernels/simt/emulated_backend.h"
#include "worker/comm/communicator.h"

namespace dslaunch::worker::comm::testing {

class StreamOrderedWork final : public Work {
 public:
  StreamOrderedWork(kernels::Backend& device, std::unique_ptr<kernels::Event> done,
                    std::shared_ptr<core::Status> result)
      : device_(device), done_(std::move(done)), result_(std::move(result)) {}
  core::Status wait(std::chrono::milliseconds) override { return wait(); }
  core::Status wait() override {
    if (done_) device_.synchronize(*done_);
    return *result_;
  }
  bool done() const override {
    return done_ == nullptr || kernels::simt::deferred_streams(device_)->done(*done_);
  }

 private:
  kernels::Backend& device_;
  std::unique_ptr<kernels::Event> done_;  // null: refused
  std::shared_ptr<core::Status> result_;
};

class StreamOrderedCommunicator final : public Communicator {
 public:
  // `host`: MPI's, over the same ranks, used only by the stream's work.
  // `device` defers its streams.
  StreamOrderedCommunicator(std::unique_ptr<Communicator> host, kernels::Backend& device)
      : host_(std::move(host)),
        device_(device),
        streams_(*kernels::simt::deferred_streams(device)),
        stream_(device.create_stream()) {}

  // Operations started, and of them run by the stream so far.
  int64_t started() const { return started_; }
  int64_t ran() const { return ran_; }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string_view axis() const override { return host_->axis(); }
  const std::vector<int>& world_ranks() const override { return host_->world_ranks(); }
  std::chrono::milliseconds timeout() const override { return host_->timeout(); }
  const WaitPolicy& wait_policy() const override { return host_->wait_policy(); }

  std::unique_ptr<Work> all_reduce(BufferRef buffer, ReduceOp op) override {
    return queue([this, buffer, op] { return host_->all_reduce(buffer, op); });
  }
  std::unique_ptr<Work> all_reduce(BufferRef in, BufferRef out, ReduceOp op) override {
    return queue([this, in, out, op] { return host_->all_reduce(in, out, op); });
  }
  std::unique_ptr<Work> reduce_scatter(BufferRef in, BufferRef out,
                                       std::span<const int64_t> counts, ReduceOp op) override {
    return queue([this, in, out, counts = std::vector<int64_t>(counts.begin(), counts.end()), op] {
      return host_->reduce_scatter(in, out, counts, op);
    });
  }
  std::unique_ptr<Work> all_gather(BufferRef in, BufferRef out, const Blocks& blocks) override {
    return queue([this, in, out, blocks] { return host_->all_gather(in, out, blocks); });
  }
  std::unique_ptr<Work> broadcast(BufferRef buffer, int root) override {
    return queue([this, buffer, root] { return host_->broadcast(buffer, root); });
  }
  std::unique_ptr<Work> all_to_all(BufferRef in, BufferRef out) override {
    return queue([this, in, out] { return host_->all_to_all(in, out); });
  }
  std::unique_ptr<Work> all_to_all(BufferRef in, const Blocks& sent, BufferRef out,
                                   const Blocks& received) override {
    return queue([this, in, sent, out, received] {
      return host_->all_to_all(in, sent, out, received);
    });
  }
  // As NCCL's communicator: point-to-point goes through all_to_all.
  std::unique_ptr<Work> send(BufferRef, int) override { return refused("send"); }
  std::unique_ptr<Work> recv(BufferRef, int) override { return refused("recv"); }
  std::unique_ptr<Work> barrier() override {
    return queue([this] { return host_->barrier(); });
  }
  std::unique_ptr<Work> then(std::function<void()> host) override {
    return queue([host = std::move(host)] {
      host();
      return std::unique_ptr<Work>();
    });
  }
  void* device_stream() override { return stream_.get(); }

  core::StatusOr<std::unique_ptr<Communicator>> duplicate(std::string_view) override {
    return core::Status(core::StatusCode::kFailedPrecondition, "not emulated");
  }
  core::StatusOr<std::unique_ptr<Communicator>> split(std::string_view, int) override {
    return core::Status(core::StatusCode::kFailedPrecondition, "not emulated");
  }
  CommStats stats() const override { return host_->stats(); }
  int64_t collectives_started() const override { return started_; }

 private:
  // Queues `start` (which starts the host's operation, or returns null
  // when it has none) on the stream, after the default stream's work.
  template <class Start>
  std::unique_ptr<Work> queue(Start start) {
    auto result = std::make_shared<core::Status>();
    ++started_;
    std::unique_ptr<kernels::Event> done =
        streams_.enqueue_after_default(*stream_, [this, result, start = std::move(start)] {
          if (std::unique_ptr<Work> work = start()) *result = work->wait();
          ++ran_;
        });
    return std::make_unique<StreamOrderedWork>(device_, std::move(done), std::move(result));
  }
  std::unique_ptr<Work> refused(std::string_view what) {
    return std::make_unique<StreamOrderedWork>(
        device_, nullptr,
        std::make_shared<core::Status>(core::StatusCode::kFailedPrecondition,
                                       std::string("a lone ") + std::string(what)));
  }

  std::unique_ptr<Communicator> host_;
  kernels::Backend& device_;
  kernels::simt::DeferredStreams& streams_;
  std::unique_ptr<kernels::Stream> stream_;
  int64_t started_ = 0;
  int64_t ran_ = 0;
};

}  // namespace dslaunch::worker::comm::testing
