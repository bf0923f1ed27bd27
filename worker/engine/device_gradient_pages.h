#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/sparse_memory.h"
#include "worker/model/gpt2_model.h"

namespace dslaunch::worker::engine {

// Backward's gradient buffer on a GPU at ZeRO stages 2-3 over several data
// ranks, where each rank keeps only its partition of the reduced
// gradients: sparse memory (kernels/sparse_memory.h) over the whole
// layout's addresses, of which only what backward is writing and the
// reducer has not yet consumed holds memory, as the host's
// ReleasableBuffer does by paging. A GPU does not page in on first touch,
// so the model prepares each range before it writes it (GradientSpace):
// its pages are committed and zeroed. The reducer then reports each bucket
// it has added to the partition (consumed()), and a page gives its memory
// back once every float on it is consumed. Every float must be consumed
// once per backward pass, before it is prepared again: the reducer's
// ready() and finish() see to it.
//
// core::backward_gradient_peak_bytes() replays the same order for the plan.
class DeviceGradientPages final : public model::GradientSpace {
 public:
  // n floats of `device`'s address space; reserving takes no memory.
  DeviceGradientPages(kernels::Backend& device, int64_t n);

  float* data() { return static_cast<float*>(memory_->data()); }

  // Throws std::runtime_error when the device has no room: the model is
  // about to write there, so this rank stops (the worker reports it).
  void prepare(int64_t begin, int64_t end) override;
  // Floats [begin, end) are reduced: their pages go back once all theirs
  // are.
  void consumed(int64_t begin, int64_t end);

  int64_t resident_bytes() const { return memory_->resident_bytes(); }
  int64_t peak_resident_bytes() const { return memory_->peak_resident_bytes(); }

 private:
  int64_t end_page(int64_t end) const { return (end + page_floats_ - 1) / page_floats_; }
  // Floats of the buffer on page p.
  int64_t page_size(int64_t p) const;

  kernels::Backend& device_;
  const int64_t n_;
  std::unique_ptr<kernels::SparseMemory> memory_;
  const int64_t page_floats_;
  std::vector<bool> held_;         // pages committed by prepare()
  std::vector<int64_t> consumed_;  // floats of each held page consumed
};

}  // namespace dslaunch::worker::engine
