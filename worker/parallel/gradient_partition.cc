#include "worker/parallel/gradient_partition.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace dslaunch::worker {

GradientPartition::GradientPartition(kernels::Backend& backend, int64_t own_begin,
                                     int64_t own_end)
    : backend_(backend),
      own_begin_(own_begin),
      memory_(static_cast<size_t>(own_end - own_begin), 0.0f) {}

GradientPartition::GradientPartition(kernels::Backend& backend,
                                     std::unique_ptr<PartitionSwap> swap, int64_t own_begin,
                                     int64_t piece_floats)
    : backend_(backend),
      own_begin_(own_begin),
      piece_floats_(std::max<int64_t>(piece_floats, 1)),
      swap_(std::move(swap)) {}

void GradientPartition::begin_sum() {
  fresh_ = true;
  written_.clear();
  factor_ = 1.0f;
  if (!swap_) {
    backend_.memset_zero(memory_.data(), static_cast<int64_t>(memory_.size() * sizeof(float)));
  }
}

core::Status GradientPartition::add(
    int64_t begin, int64_t end,
    const std::function<void(float* own, int64_t first, int64_t count)>& add) {
  if (!swap_) {
    add(memory_.data() + (begin - own_begin_), 0, end - begin);
    return {};
  }
  for (int64_t from = begin; from < end; from += piece_floats_) {
    const int64_t to = std::min(from + piece_floats_, end);
    add_buffer_.resize(static_cast<size_t>(to - from));
    if (core::Status status = read_sum(from, to); !status.ok()) return status;
    add(add_buffer_.data(), from - begin, to - from);
    if (core::Status status = swap_->store(from, to, add_buffer_.data()); !status.ok()) {
      return status.with_context("writing the swapped gradients");
    }
  }
  if (fresh_) written_.add(begin, end);
  return {};
}

core::Status GradientPartition::read_sum(int64_t from, int64_t to) {
  if (!fresh_) {
    return swap_->load(from, to, add_buffer_.data()).with_context("reading the swapped gradients");
  }
  std::fill(add_buffer_.begin(), add_buffer_.end(), 0.0f);
  for (const auto& [begin, end] : written_.ranges()) {
    const int64_t a = std::max(begin, from), b = std::min(end, to);
    if (a >= b) continue;
    if (core::Status status = swap_->load(a, b, add_buffer_.data() + (a - from)); !status.ok()) {
      return status.with_context("reading the swapped gradients");
    }
  }
  return {};
}

void GradientPartition::scale(float factor) {
  if (!swap_) {
    backend_.scale(memory_.data(), static_cast<int64_t>(memory_.size()), factor);
    return;
  }
  factor_ *= factor;
}

core::StatusOr<const float*> GradientPartition::read(int64_t begin, int64_t end) {
  if (!swap_) return static_cast<const float*>(memory_.data() + (begin - own_begin_));
  read_buffer_.resize(static_cast<size_t>(end - begin));
  if (core::Status status = swap_->load(begin, end, read_buffer_.data()); !status.ok()) {
    return status.with_context("reading the swapped gradients");
  }
  // The same product, float by float, as scale() takes in memory.
  if (factor_ != 1.0f) backend_.scale(read_buffer_.data(), end - begin, factor_);
  return static_cast<const float*>(read_buffer_.data());
}

int64_t GradientPartition::memory_bytes() const {
  if (!swap_) return static_cast<int64_t>(memory_.size() * sizeof(float));
  return static_cast<int64_t>((add_buffer_.capacity() + read_buffer_.capacity()) * sizeof(float)) +
         swap_->staging_bytes();
}

}  // namespace dslaunch::worker
