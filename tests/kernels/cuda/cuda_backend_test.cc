// The CUDA build's backend, in the --config=cuda test run: on a machine with
// a GPU, every kernel against the CPU backend (the selftest's checks); on
// one without, make_backend's refusal names the cause.
#include <catch2/catch.hpp>

#include <string>

#include "kernels/accelerator.h"
#include "kernels/make_backend.h"
#include "worker/selftest/kernel_checks.h"

namespace dslaunch::kernels {
namespace {

bool gpu_visible() {
  const AcceleratorReport report = probe_accelerators();
  return !report.gpus.empty() && report.gpus.front().kernel_ran;
}

TEST_CASE("the CUDA build reports its libraries' versions") {
  const AcceleratorReport report = probe_accelerators();
  CHECK(report.cuda_backend_built);
  CHECK_FALSE(report.cuda_runtime_version.empty());
  CHECK_FALSE(report.cublas_version.empty());
  CHECK_FALSE(report.nccl_version.empty());
}

TEST_CASE("the CUDA backend matches the CPU backend on a GPU, or says why there is none") {
  auto cuda = make_backend(DeviceKind::kCuda, 1);
  if (!gpu_visible()) {
    REQUIRE_FALSE(cuda.ok());
    CHECK(cuda.status().code() == core::StatusCode::kUnavailable);
    CHECK_THAT(cuda.status().message(), Catch::Contains("the CUDA backend cannot start"));
    return;
  }
  REQUIRE(cuda.ok());
  CHECK_THAT((*cuda)->name(), Catch::StartsWith("cuda:0"));
  auto cpu = make_backend(DeviceKind::kCpu, 1);
  REQUIRE(cpu.ok());
  for (const auto& check : worker::selftest::check_kernels(**cuda, **cpu, 5)) {
    INFO(check.kernel << " " << check.precision << ": error " << check.error << ", tolerance "
                      << check.tolerance);
    CHECK(check.passed());
  }
}

}  // namespace
}  // namespace dslaunch::kernels
