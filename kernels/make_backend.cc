#include "kernels/make_backend.h"

namespace dslaunch::kernels {

core::StatusOr<std::unique_ptr<Backend>> make_backend(DeviceKind device, int threads) {
  switch (device) {
    case DeviceKind::kCpu:
      return make_cpu_backend(threads);
    case DeviceKind::kCuda:
      break;
  }
  return core::Status(core::StatusCode::kUnavailable,
                      "this dslaunch has no CUDA kernel backend yet (only the accelerator probe); "
                      "set cluster.device: cpu");
}

}  // namespace dslaunch::kernels
