// Host memory pinned for copies (Backend::pin_host_memory) on the emulated
// backend, which counts the copies through pinned memory and refuses what
// CUDA refuses; and PinnedHostMemory, which holds a pin.
#include <csignal>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/device_buffer.h"
#include "kernels/pinned_host_memory.h"
#include "kernels/simt/emulated_backend.h"
#include "tests/support/signal_of.h"

namespace dslaunch::kernels::simt {
namespace {

std::unique_ptr<Backend> guarded() { return make_emulated_backend({}, DeviceMemory::kGuarded); }

TEST_CASE("copies from and into pinned host memory are counted apart from pageable ones") {
  const auto device = guarded();
  DeviceBuffer<float> on_device(*device, 8);
  std::vector<float> host(16, 1.5f);
  const int64_t half = 8 * static_cast<int64_t>(sizeof(float));
  {
    // The second half of `host` pinned.
    const PinnedHostMemory pin(*device, host.data() + 8, half);
    CHECK(pin.bytes() == half);
    CHECK(host_copy_tally(*device).pinned_ranges == 1);
    device->copy_host_to_device(on_device.data(), host.data() + 8, half);
    device->copy_host_to_device(on_device.data(), host.data(), half);
    device->copy_device_to_host(host.data() + 8, on_device.data(), half);
    device->copy_device_to_host(host.data(), on_device.data(), 4);
    // A copy that reaches into the pinned half counts as pinned.
    device->copy_host_to_device(on_device.data(), host.data() + 4, half);
    const HostCopyTally tally = host_copy_tally(*device);
    CHECK(tally.to_device.pinned == 2 * half);
    CHECK(tally.to_device.pageable == half);
    CHECK(tally.to_host.pinned == half);
    CHECK(tally.to_host.pageable == 4);
  }
  // Unpinned with the holder: later copies are pageable.
  CHECK(host_copy_tally(*device).pinned_ranges == 0);
  device->copy_host_to_device(on_device.data(), host.data() + 8, half);
  CHECK(host_copy_tally(*device).to_device.pageable == 2 * half);
  CHECK(host_copy_tally(*device).to_device.pinned == 2 * half);
  // The values went through.
  std::vector<float> back(8);
  device->copy_device_to_host(back.data(), on_device.data(), half);
  CHECK(back == std::vector<float>(8, 1.5f));
}

TEST_CASE("a pin moves with its holder and is released once") {
  const auto device = guarded();
  std::vector<float> host(4);
  std::vector<PinnedHostMemory> pins;
  pins.emplace_back(*device, host.data(), 8);
  pins.emplace_back(*device, host.data() + 2, 8);
  pins.reserve(16);  // moves both
  CHECK(host_copy_tally(*device).pinned_ranges == 2);
  PinnedHostMemory taken = std::move(pins[0]);
  CHECK(taken.bytes() == 8);
  CHECK(pins[0].bytes() == 0);
  pins.clear();
  CHECK(host_copy_tally(*device).pinned_ranges == 1);
  taken = PinnedHostMemory();
  CHECK(host_copy_tally(*device).pinned_ranges == 0);
}

TEST_CASE("where memory is the host's, nothing is pinned") {
  std::vector<float> host(4);
  const auto cpu = make_cpu_backend(1);
  CHECK(PinnedHostMemory(*cpu, host.data(), 16).bytes() == 0);
  const auto accessible = make_emulated_backend();
  CHECK(PinnedHostMemory(*accessible, host.data(), 16).bytes() == 0);
  CHECK(host_copy_tally(*accessible).pinned_ranges == 0);
  CHECK(host_copy_tally(*cpu).pinned_ranges == 0);
}

TEST_CASE("pinning what CUDA cannot pin is refused, and unpinning what is not pinned aborts") {
  const auto device = guarded();
  std::vector<float> host(4);
  const PinnedHostMemory pin(*device, host.data(), 16);
  CHECK_THROWS_WITH(device->pin_host_memory(host.data() + 3, 4),
                    Catch::Contains("overlaps host memory pinned"));
  DeviceBuffer<float> on_device(*device, 4);
  CHECK_THROWS_WITH(device->pin_host_memory(on_device.data(), 16),
                    Catch::Contains("the backend's memory"));
  // (Without Catch's handler, which would report the child's abort.)
  CHECK(dslaunch::testing::signal_of([&] {
          std::signal(SIGABRT, SIG_DFL);
          device->unpin_host_memory(host.data() + 1);
        }) == SIGABRT);
  CHECK(host_copy_tally(*device).pinned_ranges == 1);
}

TEST_CASE("past the limit on locked memory a pin is refused, and the copies stay pageable") {
  const auto device = guarded();
  limit_pinned_bytes(*device, 24);
  std::vector<float> host(8);
  DeviceBuffer<float> on_device(*device, 8);
  PinnedHostMemory first(*device, host.data(), 16);
  CHECK(first.bytes() == 16);
  {
    // 16 + 12 > 24: refused whole, nothing pinned.
    const PinnedHostMemory refused(*device, host.data() + 4, 12);
    CHECK(refused.bytes() == 0);
    CHECK(host_copy_tally(*device).pinned_ranges == 1);
    device->copy_host_to_device(on_device.data(), host.data() + 4, 12);
    CHECK(host_copy_tally(*device).to_device.pageable == 12);
    // Up to the limit exactly.
    const PinnedHostMemory fits(*device, host.data() + 4, 8);
    CHECK(fits.bytes() == 8);
  }
  // Released pins give their bytes back.
  first = PinnedHostMemory();
  CHECK(PinnedHostMemory(*device, host.data(), 24).bytes() == 24);
  CHECK(host_copy_tally(*device).pinned_ranges == 0);
}

}  // namespace
}  // namespace dslaunch::kernels::simt
