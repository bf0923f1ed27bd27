#pragma once

// DSL_HOST_DEVICE marks a function that both the host compiler and nvcc
// compile: the per-element and per-row math the CPU backend runs and the CUDA
// kernels run, and the kernel bodies that the CUDA thread-model emulator
// (emulator.h) runs on CPU. Under g++ it is nothing.
#if defined(__CUDACC__)
#define DSL_HOST_DEVICE __host__ __device__
#else
#define DSL_HOST_DEVICE
#endif
