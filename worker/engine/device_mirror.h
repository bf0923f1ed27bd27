#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/device_buffer.h"

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
//   from zero as ZeRO's host buffer does after it reduced a range.
// The host buffer takes a range's values as they are (it is not added to):
// ZeRO's gradient buffers hold zeros in a range until the micro-batch that
// reduces it reports it (stages 0-1 clear them when a step begins, stage 2's
// reducer after each reduction), so the host gets the same bits as if
// backward had accumulated into it. It takes only what a step's reducing
// micro-batches report: the ZeRO stages 0-2 that GPU training runs reduce
// every range in the step's last micro-batch (stage 2 in every one).
class DeviceMirror {
 public:
  // n floats of gradients, zero, and of parameters unless `parameters` is
  // false (gathered_mirror.h's). Throws std::bad_alloc when the device has
  // no room.
  DeviceMirror(kernels::Backend& device, int64_t n, bool parameters = true);

  // The parameters from host floats [0, n).
  void upload_parameters(const float* host);
  const float* parameters() const { return parameters_.data(); }
  float* gradients() { return gradients_.data(); }
  // host[begin, end) = the gradients [begin, end), which become zero here.
  void take_gradients(int64_t begin, int64_t end, float* host);

 private:
  kernels::Backend& device_;
  kernels::DeviceBuffer<float> parameters_;
  kernels::DeviceBuffer<float> gradients_;
};

}  // namespace dslaunch::worker::engine
