// The selftest's engine comparison: the engine's GPU path (every state on
// the device at ZeRO 2 and 3, or the model states in host memory and the
// model on a mirror) on the emulated CUDA kernels with guarded memory matches the CPU
// engine, on one data rank and two; a device whose device-to-host copies
// drop their last float fails it.
#include "worker/selftest/engine_check.h"

#include <catch2/catch.hpp>

#include <memory>

#include "kernels/backend.h"
#include "kernels/simt/emulated_backend.h"
#include "tests/worker/parallel/test_groups.h"
#include "tests/worker/selftest/forwarding_backend.h"

namespace dslaunch::worker::selftest {
namespace {

class DropsLastFloat final : public testing::ForwardingBackend {
 public:
  DropsLastFloat()
      : ForwardingBackend(
            kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded)) {}
  void copy_device_to_host(void* host, const void* device, int64_t bytes) override {
    inner().copy_device_to_host(host, device, bytes > 4 ? bytes - 4 : bytes);
  }
};

// At two ranks over one data group: the device's run averages on the device
// through host staging, and every rank reports the group's worst.
TEST_CASE("the engine comparison passes on guarded device memory and fails a broken copy") {
  comm::Communicator& data = comm::testing::world_data();
  auto cpu = kernels::make_cpu_backend(1);
  auto device = kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);
  const auto checks = check_engine(*device, *cpu, data, 4);
  REQUIRE(checks.size() == 6);
  CHECK(checks[0].precision == "fp32");
  CHECK(checks[0].optimizer == "GPU Adam");
  CHECK(checks[1].precision == "fp32");
  CHECK(checks[1].optimizer == "ZeRO-Offload");
  CHECK(checks[2].optimizer == "GPU Adam, ZeRO 3");
  CHECK(checks[3].precision == "bf16");
  CHECK(checks[4].optimizer == "ZeRO-Offload");
  CHECK(checks[5].optimizer == "GPU Adam, ZeRO 3");
  for (const EngineCheck& check : checks) {
    INFO(check.precision << ", " << check.optimizer << ": " << check.failure << " error "
                         << check.error << ", parameter error " << check.parameter_error);
    CHECK(check.passed());
    CHECK(check.steps == 4);
    // Learning happened: 4 steps from ln(128) = 4.85.
    CHECK(check.reference_eval_loss < 4.8);
  }

  // Small in the losses, plain in the weights over 8 steps (the gradients
  // it loses are stale every step).
  DropsLastFloat broken;
  for (const EngineCheck& check : check_engine(broken, *cpu, data, 8)) {
    INFO(check.precision << ", " << check.optimizer << ": parameter error "
                         << check.parameter_error);
    CHECK_FALSE(check.parameters_passed());
    // Every rank reports the same.
    double mine = check.parameter_error, most = mine;
    REQUIRE(data.all_reduce(comm::buffer_of(&most, 1), comm::ReduceOp::kMax)->wait().ok());
    CHECK(mine == most);
  }
}

}  // namespace
}  // namespace dslaunch::worker::selftest
