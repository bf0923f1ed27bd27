#include "worker/engine/device_gradient_pages.h"

#include <algorithm>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

namespace dslaunch::worker::engine {
namespace {
constexpr int64_t kFloat = sizeof(float);
}  // namespace

DeviceGradientPages::DeviceGradientPages(kernels::Backend& device, int64_t n)
    : device_(device),
      n_(n),
      memory_(device.reserve_sparse(std::max<int64_t>(n, 1) * kFloat)),
      page_floats_(memory_->page_bytes() / kFloat),
      held_((std::max<int64_t>(n, 1) + page_floats_ - 1) / page_floats_, false),
      consumed_(held_.size(), 0) {}

int64_t DeviceGradientPages::page_size(int64_t p) const {
  return std::min(n_, (p + 1) * page_floats_) - p * page_floats_;
}

// Pages are committed and given back a run at a time: each give back
// records an event on the GPU (kernels/cuda/cuda_sparse_memory.h).
void DeviceGradientPages::prepare(int64_t begin, int64_t end) {
  const int64_t bytes = memory_->page_bytes();
  const int64_t last = end_page(end);
  for (int64_t p = begin / page_floats_; p < last; ++p) {
    if (held_[p]) continue;
    int64_t run_end = p + 1;
    while (run_end < last && !held_[run_end]) ++run_end;
    const int64_t from = p * bytes;
    const int64_t to = std::min(run_end * bytes, memory_->bytes());
    try {
      memory_->commit(from, to);
    } catch (const std::bad_alloc&) {
      throw std::runtime_error(fmt::format(
          "the GPU has no room for backward's gradients of floats [{}, {}) ({:.1f} MiB of the "
          "gradient buffer resident); lower zero_optimization.reduce_bucket_size or the model's "
          "size per rank",
          begin, end, static_cast<double>(memory_->resident_bytes()) / (1 << 20)));
    }
    device_.memset_zero(static_cast<char*>(memory_->data()) + from, to - from);
    std::fill(held_.begin() + p, held_.begin() + run_end, true);
    p = run_end - 1;
  }
}

void DeviceGradientPages::consumed(int64_t begin, int64_t end) {
  const int64_t bytes = memory_->page_bytes();
  int64_t run = -1;  // the first page of a run to give back
  const auto give_back = [&](int64_t run_end) {
    if (run < 0) return;
    memory_->release(run * bytes, std::min(run_end * bytes, memory_->bytes()));
    run = -1;
  };
  const int64_t last = end_page(end);
  for (int64_t p = begin / page_floats_; p < last; ++p) {
    const int64_t first = p * page_floats_;
    consumed_[p] += std::min(end, first + page_floats_) - std::max(begin, first);
    if (consumed_[p] < page_size(p)) {
      give_back(p);
      continue;
    }
    consumed_[p] = 0;
    held_[p] = false;
    if (run < 0) run = p;
  }
  give_back(last);
}

}  // namespace dslaunch::worker::engine
