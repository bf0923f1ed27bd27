#pragma once

#include <string>

namespace dslaunch::kernels {

// Process set-up for fast CPU arithmetic: OpenBLAS's best kernels for this
// CPU, one shared OpenMP thread pool, and flush-to-zero on every thread.

// The OPENBLAS_CORETYPE that gives this CPU OpenBLAS's fastest single-precision
// kernels: "SkylakeX" with AVX-512 (F, BW, VL, DQ, CD), "Haswell" with AVX2 and
// FMA, and "" when OpenBLAS's own choice is as good as any.
std::string best_openblas_coretype();

// Whether OpenBLAS's `core_name` (as openblas_get_corename() reports it, in
// any case) uses kernels at least as fast as those of `coretype`: Cooperlake
// and SapphireRapids count as SkylakeX, Zen and the AVX-512 cores as Haswell.
bool openblas_core_satisfies(const std::string& core_name, const std::string& coretype);

// Makes sure OpenBLAS runs its best kernels for this CPU. Debian's OpenBLAS
// does not recognise some CPUs and falls back to slow generic kernels, and a
// stale OPENBLAS_CORETYPE can pin slow ones; OpenBLAS reads the variable only
// when the library loads, so when the loaded kernels fall short this sets
// OPENBLAS_CORETYPE to best_openblas_coretype() and re-executes
// /proc/self/exe with the same argv (the process keeps its pid). Once only:
// the marker variable DSL_BLAS_REEXEC stops a second attempt, and when the
// restarted process still lacks the kernels it says so on stderr and goes on.
// Overriding a value the user set is reported with one line on stderr.
//
// Call it first thing in main(), before MPI_Init or any thread starts: exec
// discards everything the process has done. Returns only when no restart is
// needed or the restart failed (said on stderr).
void ensure_fast_blas(char** argv);

// Makes the calling thread's OpenMP parallel regions, and OpenBLAS (the
// OpenMP build shares the same pool), use `threads` threads (at least 1), and
// sets flush-to-zero and denormals-are-zero (MXCSR FTZ|DAZ) on the calling
// thread and every thread of its OpenMP pool: denormal arithmetic can be ten
// times slower. OpenMP's thread count is a per-thread setting, so this
// applies to regions the calling thread starts.
void set_compute_threads(int threads);

}  // namespace dslaunch::kernels
