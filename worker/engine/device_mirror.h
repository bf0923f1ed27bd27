#pragma once

#include <cstdint>
#include <optional>

#include "kernels/backend.h"
#include "kernels/device_buffer.h"
#include "worker/engine/device_gradient_pages.h"
#include "worker/model/gpt2_model.h"

namespace dslaunch::worker::engine {

// Training on a backend whose memory is not the host's (a GPU) with
// offload_optimizer: the model states stay in host memory, where ZeRO's
// partitions, swap files, the MPI collectives and the CPU Adam work on them
// (DeepSpeed's ZeRO-Offload keeps them there too; without offload every
// state is on the GPU, worker/engine/device_model_state.cc), and the model
// reads and writes this mirror of them in the backend's memory:
// - the parameters, uploaded whole whenever the optimizer has changed them
//   (at ZeRO stage 3 over several ranks, or with offload_param nvme, the
//   host state never holds them whole: gathered_mirror.h uploads each region
//   around its use instead);
// - the gradient buffer backward accumulates into over a step's
//   micro-batches, moved to the host a range at a time as the reduction
//   takes them, and left zero behind, so the next micro-batch accumulates
//   from zero as ZeRO's host buffer does after it reduced a range. Where
//   the host state reduces every micro-batch (ZeRO stages 2-3 over several
//   ranks, or with offload_param nvme) it is sparse instead
//   (DeviceGradientPages): backward maps each range's pages as it writes
//   it, and a page goes back once the host has taken all its floats.
// The host buffer takes a range's values as they are (it is not added to):
// ZeRO's gradient buffers hold zeros in a range until the micro-batch that
// reduces it reports it (stages 0-1 clear them when a step begins, stage 2's
// reducer after each reduction), so the host gets the same bits as if
// backward had accumulated into it. It takes only what a step's reducing
// micro-batches report: the ZeRO stages 0-2 that GPU training runs reduce
// every range in the step's last micro-batch (stage 2 in every one).
class DeviceMirror {
 public:
  // n floats of gradients, zero (sparse when `sparse_gradients`: the model
  // must then prepare what it writes through gradient_space()), and of
  // parameters unless `parameters` is false (gathered_mirror.h's). Throws
  // std::bad_alloc when the device has no room.
  DeviceMirror(kernels::Backend& device, int64_t n, bool parameters, bool sparse_gradients);

  // The parameters from host floats [0, n).
  void upload_parameters(const float* host);
  const float* parameters() const { return parameters_.data(); }
  float* gradients() { return pages_ ? pages_->data() : gradients_.data(); }
  // The sparse gradients' hook for the model; nullptr when they are whole.
  model::GradientSpace* gradient_space() { return pages_ ? &*pages_ : nullptr; }
  // host[begin, end) = the gradients [begin, end), which become zero here
  // (sparse: are not read again this micro-batch, and their pages go back).
  void take_gradients(int64_t begin, int64_t end, float* host);
  // The same for a part of their gradient (ZeRO stage 3's output layer,
  // a vocabulary chunk at a time): backward adds the rest later and
  // reports them then, so here they only become zero.
  void take_gradient_part(int64_t begin, int64_t end, float* host);

 private:
  kernels::Backend& device_;
  kernels::DeviceBuffer<float> parameters_;
  kernels::DeviceBuffer<float> gradients_;
  std::optional<DeviceGradientPages> pages_;
};

}  // namespace dslaunch::worker::engine
