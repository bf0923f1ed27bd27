#include "worker/parallel/device_gradient_reducer.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "worker/parallel/gradient_buckets.h"

namespace dslaunch::worker {

DeviceGradientReducer::DeviceGradientReducer(comm::Communicator& comm, kernels::Backend& device,
                                             int64_t n, int64_t bucket_elements, core::DType wire)
    : comm_(comm),
      device_(device),
      n_(n),
      bucket_elements_(capped_bucket_elements(n, bucket_elements)),
      wire_(wire),
      partition_(make_zero_partition(n, comm.size(), kZeroPartitionAlignment)),
      rank_(comm.rank()),
      ranks_(comm.size()),
      largest_share_(std::max<int64_t>(1, std::min(bucket_elements_, partition_.partition_size))),
      summed_(device, largest_share_),
      progress_(n, bucket_elements) {
  if (narrow()) {
    sent_ = kernels::DeviceBuffer<uint16_t>(device, bucket_elements_);
    received_ = kernels::DeviceBuffer<uint16_t>(device, ranks_ * largest_share_);
    widened_ = kernels::DeviceBuffer<float>(device, largest_share_);
  }
  if (void* native = comm.device_stream(); native != nullptr) {
    stream_ = device.borrow_stream(native);
    if (stream_) backward_written_ = device.create_event();
  }
}

// What is still queued must finish before the buffers go (a failed step
// may end without finish()); its failures were or will be reported.
DeviceGradientReducer::~DeviceGradientReducer() {
  for (InFlight& flight : in_flight_) {
    for (const std::unique_ptr<comm::Work>& work : flight.collectives) {
      static_cast<void>(work->wait());
    }
    device_.synchronize(*flight.done);
  }
}

int64_t DeviceGradientReducer::buffer_bytes() const {
  return summed_.bytes() + sent_.bytes() + received_.bytes() + widened_.bytes();
}

void DeviceGradientReducer::all_reduce_into(float* grads) {
  gather_grads_ = grads;
  target_ = {};
}

void DeviceGradientReducer::scatter_into(ScatterTarget target) {
  gather_grads_ = nullptr;
  target_ = std::move(target);
}

core::Status DeviceGradientReducer::all_reduce(float* grads) {
  all_reduce_into(grads);
  ready(0, n_);
  return finish();
}

void DeviceGradientReducer::ready(int64_t begin, int64_t end) {
  if (!error_.ok()) return;
  error_ = progress_.report(begin, end, what());
  if (!error_.ok()) return;
  const auto [first, last] = progress_.take_complete();
  for (int64_t k = first; k < last && error_.ok(); ++k) launch(progress_.buckets()[k]);
}

core::Status DeviceGradientReducer::finish() {
  while (!in_flight_.empty()) retire_oldest();
  core::Status status = std::exchange(error_, {});
  if (status.ok()) status = progress_.all_taken(what());
  progress_.reset();
  return status;
}

std::string DeviceGradientReducer::what() const {
  return gather_grads_ != nullptr ? "gradient all-reduce on the device"
                                  : "gradient reduce-scatter on the device";
}

void DeviceGradientReducer::launch(const GradientBucket& bucket) {
  if (!overlapped()) {
    if (const core::Status status = reduce(bucket); !status.ok()) return failed(bucket, status);
    return consumed(bucket);
  }
  // After backward's work so far, on the communicator's stream.
  device_.record(*backward_written_);
  device_.set_stream(stream_.get());
  device_.wait(*backward_written_);
  const core::Status status = reduce(bucket);
  InFlight flight{bucket, std::move(started_), nullptr};
  started_.clear();
  if (spare_events_.empty()) {
    flight.done = device_.create_event();
  } else {
    flight.done = std::move(spare_events_.back());
    spare_events_.pop_back();
  }
  device_.record(*flight.done);
  device_.set_stream(nullptr);
  in_flight_.push_back(std::move(flight));
  if (!status.ok()) return failed(bucket, status);
  while (static_cast<int64_t>(in_flight_.size()) > kBucketsInFlight) retire_oldest();
}

void DeviceGradientReducer::retire_oldest() {
  InFlight flight = std::move(in_flight_.front());
  in_flight_.pop_front();
  core::Status status;
  for (const std::unique_ptr<comm::Work>& work : flight.collectives) {
    if (core::Status waited = work->wait(); status.ok()) status = waited;
  }
  device_.synchronize(*flight.done);
  spare_events_.push_back(std::move(flight.done));
  if (!status.ok()) return failed(flight.bucket, status);
  if (error_.ok()) consumed(flight.bucket);
}

void DeviceGradientReducer::consumed(const GradientBucket& bucket) {
  if (target_.consumed) target_.consumed(bucket.begin, bucket.end);
}

void DeviceGradientReducer::failed(const GradientBucket& bucket, const core::Status& status) {
  if (!error_.ok()) return;
  error_ = status.with_context(fmt::format("{}: bucket [{}, {})", what(), bucket.begin, bucket.end));
}

core::Status DeviceGradientReducer::started(std::unique_ptr<comm::Work> work) {
  if (!overlapped()) return work->wait();
  // One refused at its start is done (and failed) already.
  core::Status status = work->done() ? work->wait() : core::Status();
  started_.push_back(std::move(work));
  return status;
}

core::Status DeviceGradientReducer::reduce(const GradientBucket& bucket) {
  const comm::Blocks shares = bucket_shares(partition_, bucket.begin, bucket.end);
  const float* grads = gather_grads_ != nullptr ? gather_grads_ : target_.grads;
  if (core::Status status = sum_share(grads + bucket.begin, shares); !status.ok()) return status;
  const int64_t own = shares.counts[rank_];
  device_.divide(summed_.data(), own, static_cast<float>(ranks_));
  if (gather_grads_ != nullptr) return gather_mean(gather_grads_ + bucket.begin, shares);
  if (own > 0) add_mean(bucket.begin, own);
  return {};
}

core::Status DeviceGradientReducer::sum_share(const float* bucket, const comm::Blocks& shares) {
  const int64_t count = shares.displacements.back() + shares.counts.back();
  const int64_t own = shares.counts[rank_];
  if (!narrow()) {
    return started(comm_.reduce_scatter(comm::buffer_of(bucket, count),
                                        comm::buffer_of(summed_.data(), own), shares.counts,
                                        comm::ReduceOp::kSum));
  }
  // Every rank's share for this one arrives rounded, in rank order, and is
  // added in fp32 in that order.
  device_.convert(sent_.data(), wire_, bucket, core::DType::kF32, count);
  const comm::Blocks received = comm::Blocks::consecutive(std::vector<int64_t>(ranks_, own));
  if (core::Status status = started(comm_.all_to_all(
          {sent_.data(), count, wire_}, shares, {received_.data(), ranks_ * own, wire_}, received));
      !status.ok()) {
    return status;
  }
  device_.convert(summed_.data(), core::DType::kF32, received_.data(), wire_, own);
  for (int r = 1; r < ranks_; ++r) {
    device_.convert(widened_.data(), core::DType::kF32, received_.data() + r * own, wire_, own);
    device_.residual_forward(summed_.data(), summed_.data(), widened_.data(), own);
  }
  return {};
}

core::Status DeviceGradientReducer::gather_mean(float* values, const comm::Blocks& shares) {
  const int64_t own = shares.counts[rank_];
  const int64_t count = shares.displacements.back() + shares.counts.back();
  if (!narrow()) {
    return started(comm_.all_gather(comm::buffer_of(summed_.data(), own),
                                    comm::buffer_of(values, count), shares));
  }
  // The means gathered rounded, then widened into the bucket.
  device_.convert(received_.data(), wire_, summed_.data(), core::DType::kF32, own);
  if (core::Status status = started(
          comm_.all_gather({received_.data(), own, wire_}, {sent_.data(), count, wire_}, shares));
      !status.ok()) {
    return status;
  }
  device_.convert(values, core::DType::kF32, sent_.data(), wire_, count);
  return {};
}

// The mean, in 16-bit communication rounded to the wire's type, as the
// all-reduce rounds the mean it gathers.
void DeviceGradientReducer::add_mean(int64_t begin, int64_t own) {
  if (narrow()) {
    device_.convert(received_.data(), wire_, summed_.data(), core::DType::kF32, own);
    device_.convert(summed_.data(), core::DType::kF32, received_.data(), wire_, own);
  }
  const int64_t own_begin = partition_.begin(rank_);
  float* const target = target_.partition_grads + (std::max(begin, own_begin) - own_begin);
  device_.residual_forward(target, target, summed_.data(), own);
}

}  // namespace dslaunch::worker
