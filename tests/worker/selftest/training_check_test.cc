// The selftest's training comparison: on the emulated CUDA kernels with
// guarded memory (the host cannot touch device memory between backend
// calls) it passes, so its loop keeps every tensor in the device's memory as
// a GPU requires; a device whose AdamW is off fails it.
#include "worker/selftest/training_check.h"

#include <catch2/catch.hpp>

#include <memory>

#include "kernels/backend.h"
#include "kernels/simt/emulated_backend.h"

namespace dslaunch::worker::selftest {
namespace {

TEST_CASE("the training comparison runs on guarded device memory and matches the CPU") {
  auto device = kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);
  auto reference = kernels::make_cpu_backend(1);
  const auto checks = check_training(*device, *reference, 4);
  REQUIRE(checks.size() == 2);
  CHECK(checks[0].precision == "fp32");
  CHECK(checks[1].precision == "bf16");
  for (const TrainingCheck& check : checks) {
    INFO(check.precision << ": error " << check.error);
    CHECK(check.passed());
    CHECK(check.steps == 4);
    CHECK(check.device_final_loss == Approx(check.reference_final_loss).epsilon(1e-3));
    // Learning happened: 4 steps from ln(128) = 4.85.
    CHECK(check.reference_final_loss < 4.85);
  }
}

}  // namespace
}  // namespace dslaunch::worker::selftest
