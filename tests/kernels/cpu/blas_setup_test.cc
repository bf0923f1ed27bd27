#include "kernels/cpu/blas_setup.h"

#include <omp.h>
#include <xmmintrin.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "tests/support/run_command.h"

namespace dslaunch::kernels {
namespace {

using dslaunch::testing::run_command;
using dslaunch::testing::runfile;

// The CPU's feature flags as the kernel lists them in /proc/cpuinfo: an
// account of the CPU independent of __builtin_cpu_supports.
std::set<std::string> cpuinfo_flags() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string flag; words >> flag;) flags.insert(flag);
    return flags;
  }
  return {};
}

std::string expected_coretype() {
  const auto flags = cpuinfo_flags();
  const auto has = [&](const char* flag) { return flags.count(flag) > 0; };
  if (has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq") && has("avx512cd")) {
    return "SkylakeX";
  }
  if (has("avx2") && has("fma")) return "Haswell";
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string probe() { return runfile("tests/kernels/cpu/blas_setup_probe"); }

TEST_CASE("best_openblas_coretype follows the CPU's features") {
  CHECK(best_openblas_coretype() == expected_coretype());
}

TEST_CASE("openblas_core_satisfies ranks OpenBLAS's kernel families") {
  CHECK(openblas_core_satisfies("SkylakeX", "SkylakeX"));
  CHECK(openblas_core_satisfies("COOPERLAKE", "SkylakeX"));
  CHECK(openblas_core_satisfies("SapphireRapids", "Haswell"));
  CHECK(openblas_core_satisfies("Zen", "Haswell"));
  CHECK(openblas_core_satisfies("Prescott", ""));
  CHECK_FALSE(openblas_core_satisfies("Haswell", "SkylakeX"));
  CHECK_FALSE(openblas_core_satisfies("Zen", "SkylakeX"));
  CHECK_FALSE(openblas_core_satisfies("Prescott", "Haswell"));
}

TEST_CASE("ensure_fast_blas restarts a process that loaded slow kernels") {
  const std::string best = best_openblas_coretype();
  if (best.empty()) {
    WARN("this CPU has neither AVX2 nor AVX-512: OpenBLAS's own choice stands");
    return;
  }
  // A core type one family below the best, as a stale setting would be.
  const std::string slow = best == "SkylakeX" ? "Haswell" : "Prescott";

  SECTION("a slower OPENBLAS_CORETYPE set by the user is replaced, and said so") {
    const auto result =
        run_command("env OPENBLAS_CORETYPE=" + slow + " " + probe() + " one 'two words'");
    REQUIRE(result.exit_code == 0);
    CHECK(contains(result.output, "core=" + best + "\n"));
    CHECK(contains(result.output, "coretype=" + best + "\n"));
    CHECK(contains(result.output, "OPENBLAS_CORETYPE=" + slow + " replaced by " + best));
    // The same arguments, and no marker left for processes it starts.
    CHECK(contains(result.output, "arg=one\narg=two words\n"));
    CHECK(contains(result.output, "marker=\n"));
  }
  SECTION("OpenBLAS's own choice stands when it is as fast") {
    const auto result = run_command("env -u OPENBLAS_CORETYPE " + probe());
    REQUIRE(result.exit_code == 0);
    const auto start = result.output.find("core=") + 5;
    const std::string core = result.output.substr(start, result.output.find('\n', start) - start);
    CHECK(openblas_core_satisfies(core, best));
    CHECK_FALSE(contains(result.output, "replaced"));
  }
  SECTION("the best core type set by the user is left alone") {
    const auto result = run_command("env OPENBLAS_CORETYPE=" + best + " " + probe());
    REQUIRE(result.exit_code == 0);
    CHECK(contains(result.output, "core=" + best + "\n"));
    CHECK_FALSE(contains(result.output, "replaced"));
  }
  SECTION("a restarted process never restarts again") {
    const auto result =
        run_command("env OPENBLAS_CORETYPE=" + slow + " DSL_BLAS_REEXEC=1 " + probe());
    REQUIRE(result.exit_code == 0);
    CHECK(contains(result.output, "core=" + slow + "\n"));
    CHECK(contains(result.output, "still runs its " + slow + " kernels"));
    CHECK(contains(result.output, "marker=\n"));
  }
}

bool flushes_denormals() { return (_mm_getcsr() & 0x8040) == 0x8040; }

// Multiplies two normal floats whose product is denormal: 0 under FTZ.
float denormal_product() {
  volatile float tiny = 1e-30f;
  volatile float small = 1e-10f;
  return tiny * small;
}

TEST_CASE("set_compute_threads sets the thread count and FTZ/DAZ on every compute thread") {
  set_compute_threads(2);
  CHECK(omp_get_max_threads() == 2);
  CHECK(flushes_denormals());
  std::vector<int> flushing(2, 0);
  std::vector<float> products(2, -1.0f);
#pragma omp parallel
  {
    flushing[omp_get_thread_num()] = flushes_denormals();
    products[omp_get_thread_num()] = denormal_product();
  }
  CHECK(flushing == std::vector<int>{1, 1});
  CHECK(products == std::vector<float>{0.0f, 0.0f});
}

TEST_CASE("the CPU backend flushes denormals in its kernels, on every thread") {
  std::vector<float> out;
  // A thread of its own whose OpenMP pool exists, and does not flush, before
  // the backend is made.
  std::thread([&] {
    _mm_setcsr(_mm_getcsr() & ~0x8040u);
#pragma omp parallel num_threads(2)
    _mm_setcsr(_mm_getcsr() & ~0x8040u);
    auto backend = make_cpu_backend(2);
    // Denormal inputs read as zero under DAZ; two chunks, one per thread.
    const int64_t n = 2 * 16384;
    const std::vector<float> denormals(n, 1e-40f);
    const std::vector<float> zeros(n, 0.0f);
    out.assign(n, -1.0f);
    backend->residual_forward(out.data(), denormals.data(), zeros.data(), n);
  }).join();
  CHECK(std::count(out.begin(), out.end(), 0.0f) == static_cast<int64_t>(out.size()));
}

}  // namespace
}  // namespace dslaunch::kernels
