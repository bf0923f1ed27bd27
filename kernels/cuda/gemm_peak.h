#pragma once

namespace dslaunch::kernels::cuda {

// The best rate, in TFLOP/s, of n×n×n matrix products on the current GPU
// through cuBLAS over `repeats` timed runs: bf16 operands with fp32
// accumulation (the tensor-core rate a bf16 run's MFU is measured against),
// or fp32 (no TF32). Operands hold random values: zeros would draw less
// power and clock higher than training does. Throws std::runtime_error
// naming the CUDA or cuBLAS call that failed.
double measure_gemm_tflops(bool bf16, int n, int repeats);

}  // namespace dslaunch::kernels::cuda
