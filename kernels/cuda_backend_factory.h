#pragma once

#include <memory>

#include "core/status.h"
#include "kernels/backend.h"

namespace dslaunch::kernels {

// The CUDA backend on visible GPU `device` where this build has it
// (--config=cuda: kernels/cuda), kUnavailable saying why otherwise (not
// built; no such GPU or no driver).
core::StatusOr<std::unique_ptr<Backend>> make_cuda_backend_if_built(int device);

}  // namespace dslaunch::kernels
