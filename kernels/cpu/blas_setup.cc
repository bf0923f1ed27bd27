#include "kernels/cpu/blas_setup.h"

#include <cblas.h>
#include <omp.h>
#include <strings.h>
#include <unistd.h>
#include <xmmintrin.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace dslaunch::kernels {
namespace {

// Set in the environment of the re-executed process, so it never restarts
// itself a second time.
constexpr const char* kReexecMarker = "DSL_BLAS_REEXEC";

// MXCSR bit 15 (flush to zero) and bit 6 (denormals are zero).
constexpr unsigned kFlushDenormals = 0x8040;

bool is_one_of(const std::string& core_name, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(),
                     [&](const char* name) { return strcasecmp(core_name.c_str(), name) == 0; });
}

// 2 for OpenBLAS's AVX-512 kernel families, 1 for its AVX2 ones, 0 for older.
int kernel_tier(const std::string& core_name) {
  if (is_one_of(core_name, {"SkylakeX", "Cooperlake", "SapphireRapids"})) return 2;
  if (is_one_of(core_name, {"Haswell", "Zen"})) return 1;
  return 0;
}

}  // namespace

std::string best_openblas_coretype() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512cd")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

bool openblas_core_satisfies(const std::string& core_name, const std::string& coretype) {
  return kernel_tier(core_name) >= kernel_tier(coretype);
}

void ensure_fast_blas(char** argv) {
  const std::string best = best_openblas_coretype();
  const std::string core_name = openblas_get_corename();
  const bool restarted = std::getenv(kReexecMarker) != nullptr;
  // Processes this one starts decide for themselves.
  if (restarted) unsetenv(kReexecMarker);
  if (openblas_core_satisfies(core_name, best)) return;
  if (restarted) {
    std::fprintf(stderr,
                 "%s: OpenBLAS still runs its %s kernels after a restart with "
                 "OPENBLAS_CORETYPE=%s; matrix products will be slow\n",
                 program_invocation_short_name, core_name.c_str(), best.c_str());
    return;
  }
  const char* user_value = std::getenv("OPENBLAS_CORETYPE");
  if (user_value != nullptr && *user_value != '\0') {
    // A notice, not a problem: on stdout, so that the last line of a rank's
    // stderr (which a failure report quotes) stays about what went wrong.
    std::printf("%s: OPENBLAS_CORETYPE=%s replaced by %s: OpenBLAS's %s kernels are slower than "
                "its %s kernels on this CPU; restarting so OpenBLAS loads them\n",
                program_invocation_short_name, user_value, best.c_str(), core_name.c_str(),
                best.c_str());
    std::fflush(stdout);  // exec discards what stdio still buffers
  }
  setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
  setenv(kReexecMarker, "1", 1);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr,
               "%s: could not restart with OPENBLAS_CORETYPE=%s (exec /proc/self/exe: %s); "
               "matrix products will be slow\n",
               program_invocation_short_name, best.c_str(), std::strerror(errno));
  unsetenv(kReexecMarker);
}

void set_compute_threads(int threads) {
  threads = std::max(threads, 1);
  // Threads OpenMP creates from here on inherit the calling thread's MXCSR;
  // the parallel region below covers those that already exist.
  _mm_setcsr(_mm_getcsr() | kFlushDenormals);
  omp_set_dynamic(0);
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
#pragma omp parallel num_threads(threads)
  _mm_setcsr(_mm_getcsr() | kFlushDenormals);
}

}  // namespace dslaunch::kernels
