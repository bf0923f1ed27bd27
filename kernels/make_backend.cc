#include "kernels/make_backend.h"

#include "kernels/cuda_backend_factory.h"

namespace dslaunch::kernels {

core::StatusOr<std::unique_ptr<Backend>> make_backend(DeviceKind device, int threads, int gpu) {
  switch (device) {
    case DeviceKind::kCpu:
      return make_cpu_backend(threads);
    case DeviceKind::kCuda:
      return make_cuda_backend_if_built(gpu);
  }
  return core::Status(core::StatusCode::kInvalidArgument, "unknown device kind");
}

}  // namespace dslaunch::kernels
