#include "worker/parallel/device_gradient_reducer.h"

#include <algorithm>

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
}

int64_t DeviceGradientReducer::buffer_bytes() const {
  return summed_.bytes() + sent_.bytes() + received_.bytes() + widened_.bytes();
}

core::Status DeviceGradientReducer::sum_share(const float* bucket, const comm::Blocks& shares) {
  const int64_t count = shares.displacements.back() + shares.counts.back();
  const int64_t own = shares.counts[rank_];
  if (!narrow()) {
    return comm_
        .reduce_scatter(comm::buffer_of(bucket, count), comm::buffer_of(summed_.data(), own),
                        shares.counts, comm::ReduceOp::kSum)
        ->wait();
  }
  // Every rank's share for this one arrives rounded, in rank order, and is
  // added in fp32 in that order.
  device_.convert(sent_.data(), wire_, bucket, core::DType::kF32, count);
  const comm::Blocks received = comm::Blocks::consecutive(std::vector<int64_t>(ranks_, own));
  if (core::Status status = comm_
                                .all_to_all({sent_.data(), count, wire_}, shares,
                                            {received_.data(), ranks_ * own, wire_}, received)
                                ->wait();
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

core::Status DeviceGradientReducer::all_reduce(float* grads) {
  for (const GradientBucket& bucket : gradient_buckets(n_, bucket_elements_)) {
    const std::string context =
        fmt::format("gradient all-reduce on the device: bucket [{}, {})", bucket.begin, bucket.end);
    const comm::Blocks shares = bucket_shares(partition_, bucket.begin, bucket.end);
    const int64_t own = shares.counts[rank_];
    const int64_t count = bucket.end - bucket.begin;
    float* const values = grads + bucket.begin;
    if (core::Status status = sum_share(values, shares); !status.ok()) {
      return status.with_context(context);
    }
    device_.divide(summed_.data(), own, static_cast<float>(ranks_));
    core::Status gathered;
    if (!narrow()) {
      gathered = comm_
                     .all_gather(comm::buffer_of(summed_.data(), own),
                                 comm::buffer_of(values, count), shares)
                     ->wait();
    } else {
      // The means gathered rounded, then widened into the bucket.
      device_.convert(received_.data(), wire_, summed_.data(), core::DType::kF32, own);
      gathered =
          comm_.all_gather({received_.data(), own, wire_}, {sent_.data(), count, wire_}, shares)
              ->wait();
      if (gathered.ok()) device_.convert(values, core::DType::kF32, sent_.data(), wire_, count);
    }
    if (!gathered.ok()) return gathered.with_context(context);
  }
  return {};
}

void DeviceGradientReducer::ready(int64_t begin, int64_t end) {
  if (!error_.ok()) return;
  error_ = progress_.report(begin, end, "gradient reduce-scatter on the device");
  if (!error_.ok()) return;
  const auto [first, last] = progress_.take_complete();
  for (int64_t k = first; k < last; ++k) {
    const GradientBucket& bucket = progress_.buckets()[k];
    error_ = add_bucket_mean(bucket.begin, bucket.end);
    if (!error_.ok()) {
      error_ = error_.with_context(fmt::format(
          "gradient reduce-scatter on the device: bucket [{}, {})", bucket.begin, bucket.end));
      return;
    }
    if (target_.consumed) target_.consumed(bucket.begin, bucket.end);
  }
}

core::Status DeviceGradientReducer::finish() {
  core::Status status = std::exchange(error_, {});
  if (status.ok()) status = progress_.all_taken("gradient reduce-scatter on the device");
  progress_.reset();
  return status;
}

core::Status DeviceGradientReducer::add_bucket_mean(int64_t begin, int64_t end) {
  const comm::Blocks shares = bucket_shares(partition_, begin, end);
  const int64_t own = shares.counts[rank_];
  if (core::Status status = sum_share(target_.grads + begin, shares); !status.ok()) return status;
  if (own == 0) return {};
  // The mean, in 16-bit communication rounded to the wire's type, as the
  // all-reduce rounds the mean it gathers.
  device_.divide(summed_.data(), own, static_cast<float>(ranks_));
  if (narrow()) {
    device_.convert(received_.data(), wire_, summed_.data(), core::DType::kF32, own);
    device_.convert(summed_.data(), core::DType::kF32, received_.data(), wire_, own);
  }
  const int64_t own_begin = partition_.begin(rank_);
  float* const target = target_.partition_grads + (std::max(begin, own_begin) - own_begin);
  device_.residual_forward(target, target, summed_.data(), own);
  return {};
}

}  // namespace dslaunch::worker
