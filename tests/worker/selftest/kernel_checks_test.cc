// The selftest's kernel checks: a device that computes one kernel slightly
// wrong fails that kernel's check and no other, and the emulated CUDA
// kernels pass them all.
#include "worker/selftest/kernel_checks.h"

#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/host_ranges.h"
#include "kernels/simt/emulated_backend.h"
#include "tests/worker/selftest/forwarding_backend.h"

namespace dslaunch::worker::selftest {
namespace {

using kernels::Backend;

// The CPU backend, except that gelu_backward's gradient is 0.1% too large.
class GeluOffByATenthPercent final : public testing::ForwardingBackend {
 public:
  GeluOffByATenthPercent() : ForwardingBackend(kernels::make_cpu_backend(1)) {}
  std::string name() const override { return "broken gelu"; }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    std::vector<float> scaled(dout, dout + n);
    for (float& value : scaled) value *= 1.001f;
    inner().gelu_backward(dinp, inp, scaled.data(), n);
  }
};

TEST_CASE("a kernel slightly off fails its own check and no other") {
  GeluOffByATenthPercent device;
  auto reference = kernels::make_cpu_backend(1);
  const std::vector<KernelCheck> checks = check_kernels(device, *reference, 3);
  REQUIRE(checks.size() > 15);
  for (const KernelCheck& check : checks) {
    INFO(check.kernel << " " << check.precision << ": error " << check.error);
    const bool gelu = check.kernel == "gelu_forward + backward";
    CHECK(check.passed() != gelu);
    // Far above the tolerance: the gradient (on top of what it held) is off by 1e-3.
    if (gelu) CHECK(check.error > 30 * check.tolerance);
  }
}

// The CPU backend, except that a copy from host memory pinned with it reads
// the host bytes late, at the next copy back: an asynchronous copy from
// page-locked memory that the backend did not wait for.
class LatePinnedCopies final : public testing::ForwardingBackend {
 public:
  LatePinnedCopies() : ForwardingBackend(kernels::make_cpu_backend(1)) {}
  std::string name() const override { return "late pinned copies"; }
  bool pin_host_memory(const void* host, int64_t bytes) override {
    return pinned_.add(host, bytes);
  }
  void unpin_host_memory(const void* host) override { pinned_.remove(host); }
  void copy_host_to_device(void* device, const void* host, int64_t bytes) override {
    if (!pinned_.touches(host, bytes)) return inner().copy_host_to_device(device, host, bytes);
    late_.push_back(
        [this, device, host, bytes] { inner().copy_host_to_device(device, host, bytes); });
  }
  void copy_device_to_host(void* host, const void* device, int64_t bytes) override {
    for (const auto& copy : std::exchange(late_, {})) copy();
    inner().copy_device_to_host(host, device, bytes);
  }

 private:
  kernels::HostRanges pinned_;
  std::vector<std::function<void()>> late_;
};

TEST_CASE("a copy from pinned memory that reads the host bytes late fails the copy check") {
  LatePinnedCopies device;
  auto reference = kernels::make_cpu_backend(1);
  const std::vector<KernelCheck> checks = check_kernels(device, *reference, 5);
  bool checked = false;
  for (const KernelCheck& check : checks) {
    INFO(check.kernel << " " << check.precision << ": error " << check.error);
    const bool copies = check.kernel == "copies through page-locked host memory";
    CHECK(check.passed() != copies);
    checked = checked || copies;
  }
  CHECK(checked);
}

// On guarded memory: the checks reach the device's memory through the
// backend's copies only, as they must on a GPU.
TEST_CASE("every kernel of the backend interface is checked, in each precision it has") {
  auto emulated = kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);
  auto reference = kernels::make_cpu_backend(1);
  const std::vector<KernelCheck> checks = check_kernels(*emulated, *reference, 4);
  std::set<std::string> covered;
  for (const KernelCheck& check : checks) {
    INFO(check.kernel << " " << check.precision << ": error " << check.error);
    CHECK(check.passed());
    covered.insert(check.kernel + " | " + check.precision);
  }
  for (const char* precision : {"fp32", "bf16 products", "fp16 products"}) {
    CHECK(covered.count(std::string("matmul_forward + backward | ") + precision) == 1);
    CHECK(covered.count(std::string("logits_forward + backward | ") + precision) == 1);
  }
  for (const char* precision : {"fp32", "bf16 copy", "fp16 copy"}) {
    CHECK(covered.count(std::string("adamw_update | ") + precision) == 1);
  }
  CHECK(covered.count("round_to, convert | bf16") == 1);
  CHECK(covered.count("round_to, convert | fp16") == 1);
  for (const char* kernel :
       {"encoder_forward + backward", "layernorm_forward + backward",
        "attention_forward + backward", "gelu_forward + backward", "residual, scale, fill",
        "sum_of_squares, mean", "softmax_crossentropy_forward + backward",
        "vocab_parallel_max, _sums, _softmax_loss", "copies through page-locked host memory"}) {
    CHECK(covered.count(std::string(kernel) + " | fp32") == 1);
  }
}

}  // namespace
}  // namespace dslaunch::worker::selftest
