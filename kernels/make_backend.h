#pragma once

#include <memory>

#include "core/status.h"
#include "kernels/backend.h"

namespace dslaunch::kernels {

enum class DeviceKind { kCpu, kCuda };

// The backend for the job's device (cluster.device): with `threads` compute
// threads on the CPU, or on visible GPU `gpu` (the plan's cuda:<index> for
// the rank). kUnavailable where this build has no kernels for it, or the
// GPU cannot be used.
core::StatusOr<std::unique_ptr<Backend>> make_backend(DeviceKind device, int threads, int gpu = 0);

}  // namespace dslaunch::kernels
