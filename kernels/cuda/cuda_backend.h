#pragma once

#include <memory>

#include "kernels/backend.h"

namespace dslaunch::kernels::cuda {

// The CUDA backend on GPU `device` (an index among the visible GPUs): the
// kernels of kernels/simt, products through cuBLAS (cublas_gemm.h).
// Throws std::runtime_error naming the cause when there is no such GPU or
// CUDA cannot start on it.
std::unique_ptr<Backend> make_cuda_backend(int device);

}  // namespace dslaunch::kernels::cuda
