#include "kernels/make_backend.h"

#include "kernels/cuda_backend_factory.h"

namespace dslaunch::kernels {

core::StatusOr<std::unique_ptr<Backend>> make_backend(DeviceKind device, int threads) {
  switch (device) {
    case DeviceKind::kCpu:
      return make_cpu_backend(threads);
    case DeviceKind::kCuda:
      // The rank's GPU: the launcher makes it the only one visible
      // (CUDA_VISIBLE_DEVICES from the plan).
      return make_cuda_backend_if_built(0);
  }
  return core::Status(core::StatusCode::kInvalidArgument, "unknown device kind");
}

}  // namespace dslaunch::kernels
