#pragma once

// Helpers for the CPU kernels' hot loops: compiled per instruction set,
// vectorised by GCC (`#pragma omp simd`), split over OpenMP threads in a way
// that never changes the result.

#include <algorithm>
#include <cstdint>

// Compiles a function for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA) and the
// baseline; the dynamic loader picks the best for the running CPU, so one
// binary runs anywhere and uses AVX-512 where it exists. OpenMP outlines the
// body of a parallel region into a function of its own that the attribute
// does not reach, so put it on the per-row or per-chunk function a region
// calls.
#define DSL_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

// glibc's libmvec has vector versions of these (for SSE, AVX2 and AVX-512,
// accurate to a few ulp); <cmath> declares them only under -ffast-math,
// which would also license reassociation everywhere else.
extern "C" {
#pragma omp declare simd notinbranch
float expf(float) noexcept;
#pragma omp declare simd notinbranch
float tanhf(float) noexcept;
}

namespace dslaunch::kernels::cpu {

// Elements per chunk of an elementwise kernel: large enough to amortise a
// thread hand-off, small enough to balance two threads on small tensors.
inline constexpr int64_t kChunk = 16384;

// Calls body(begin, end) for consecutive chunks of [0, n) of kChunk elements,
// spread over the OpenMP threads. The chunks do not depend on the thread
// count, so neither does the result.
template <typename Body>
void for_each_chunk(int64_t n, const Body& body) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t begin = chunk * kChunk;
    body(begin, std::min(n, begin + kChunk));
  }
}

}  // namespace dslaunch::kernels::cpu
