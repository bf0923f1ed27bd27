// AdamW with its states on a device (AdamW::place_on_device) takes the steps
// the same optimizer takes in host memory, bit for bit: staged a chunk at a
// time from host memory or reading the device's own, on a slice of the
// layout that starts mid-tensor, with resumed moments. The device is the
// emulator's guarded memory, which faults on any host access to it.
#include "worker/engine/optimizer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"
#include "kernels/backend.h"
#include "kernels/device_buffer.h"
#include "kernels/simt/emulated_backend.h"

namespace dslaunch::worker::engine {
namespace {

core::ParameterTable small_table() {
  core::Gpt2Config config;
  config.num_layers = 1;
  config.channels = 32;
  config.num_heads = 2;
  config.vocab_size = 60;
  config.padded_vocab_size = 64;
  config.max_seq_len = 16;
  return core::ParameterTable(config);
}

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(n);
  for (float& v : values) v = normal(engine);
  return values;
}

spec::OptimizerSpec adamw_spec() {
  spec::OptimizerSpec spec;
  spec.lr = 1e-2;
  spec.weight_decay = 0.1;
  return spec;
}

// Both moments of the optimizer's floats, read back.
std::vector<float> moments_of(AdamW& optimizer, int64_t n) {
  std::vector<float> both(2 * n);
  REQUIRE(optimizer.read_moment(false, 0, n, both.data()).ok());
  REQUIRE(optimizer.read_moment(true, 0, n, both.data() + n).ok());
  return both;
}

TEST_CASE("AdamW on a device steps as in host memory, staged a chunk at a time or not") {
  const core::ParameterTable table = small_table();
  const int64_t total = table.total();
  // A slice that starts and ends inside tensors, weight-decayed or not.
  const int64_t begin = 100;
  const int64_t end = total - 50;
  const int64_t n = end - begin;
  constexpr int64_t kChunk = 1000;
  REQUIRE(n > 5 * kChunk);
  const std::vector<float> initial = random_floats(total, 1, 0.5f);
  auto cpu = kernels::make_cpu_backend(1);
  auto device = kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);

  for (const core::DType precision : {core::DType::kF32, core::DType::kBF16}) {
    INFO(core::dtype_name(precision));
    const bool mixed = precision != core::DType::kF32;
    // In host memory: masters (the weights in fp32) and, in 16-bit
    // training, the weights they round to.
    AdamW host(adamw_spec(), table, begin, end);
    std::vector<float> host_masters = initial;
    std::vector<float> host_weights(total, 0.0f);
    // On the device, staged: the host's weights receive the update.
    AdamW staged(adamw_spec(), table, begin, end);
    staged.place_on_device(*device, precision, AdamW::StepMemory::kHost, nullptr, kChunk);
    CHECK(staged.moment_group() == kChunk);
    staged.set_masters(0, n, initial.data() + begin);
    std::vector<float> staged_weights(total, 0.0f);
    // On the device, its own memory: the gradients there, the weights
    // updated there (in fp32 they are the masters).
    AdamW resident(adamw_spec(), table, begin, end);
    kernels::DeviceBuffer<float> device_weights(*device, total);
    kernels::DeviceBuffer<float> device_grads(*device, total);
    device->copy_host_to_device(device_weights.data(), initial.data(), total * 4);
    resident.place_on_device(*device, precision, AdamW::StepMemory::kDevice,
                             mixed ? nullptr : device_weights.data(), kChunk);
    if (mixed) resident.set_masters(0, n, initial.data() + begin);

    const auto rounded = [&](std::vector<float>& weights) {
      return mixed ? RoundedCopy{weights.data(), precision} : RoundedCopy{};
    };
    for (int step = 0; step < 3; ++step) {
      INFO("step " << step);
      const std::vector<float> grads = random_floats(total, 10 + step, 0.1f);
      REQUIRE(host.step(*cpu, host_masters.data(), grads.data(), 1e-2, rounded(host_weights)).ok());
      // The partition's gradients alone, as ZeRO stage 2 holds them.
      REQUIRE(staged
                  .step_partition(*device, staged_weights.data(), grads.data() + begin, 1e-2,
                                  rounded(staged_weights))
                  .ok());
      device->copy_host_to_device(device_grads.data(), grads.data(), total * 4);
      REQUIRE(resident
                  .step(*device, device_weights.data(), device_grads.data(), 1e-2,
                        mixed ? RoundedCopy{device_weights.data(), precision} : RoundedCopy{})
                  .ok());
    }
    // What the model reads next, over the slice.
    const std::vector<float>& expected = mixed ? host_weights : host_masters;
    std::vector<float> from_device(total);
    device->copy_device_to_host(from_device.data(), device_weights.data(), total * 4);
    for (int64_t i = begin; i < end; ++i) {
      if (staged_weights[i] != expected[i] || from_device[i] != expected[i]) {
        FAIL("weight " << i << ": " << staged_weights[i] << " and " << from_device[i]
                       << " on the device, " << expected[i] << " in host memory");
      }
    }
    // Outside the slice the device wrote nothing.
    CHECK(staged_weights[begin - 1] == 0.0f);
    CHECK(staged_weights[end] == 0.0f);
    CHECK(from_device[begin - 1] == initial[begin - 1]);
    // The masters and moments a checkpoint reads.
    std::vector<float> masters(n);
    for (AdamW* optimizer : {&staged, &resident}) {
      optimizer->read_masters(0, n, masters.data());
      CHECK(masters ==
            std::vector<float>(host_masters.begin() + begin, host_masters.begin() + end));
      CHECK(moments_of(*optimizer, n) == moments_of(host, n));
    }

    // Resumed: the moments set a chunk at a time, the masters from the
    // checkpoint's; one more step matches.
    AdamW resumed(adamw_spec(), table, begin, end);
    resumed.place_on_device(*device, precision, AdamW::StepMemory::kHost, nullptr, kChunk);
    resumed.set_masters(0, n, host_masters.data() + begin);
    const std::vector<float> moments = moments_of(host, n);
    for (int64_t from = 0; from < n; from += resumed.moment_group()) {
      const int64_t count = std::min(resumed.moment_group(), n - from);
      REQUIRE(
          resumed.set_moments(from, count, moments.data() + from, moments.data() + n + from).ok());
    }
    resumed.set_steps_taken(host.steps_taken());
    std::vector<float> resumed_weights(total, 0.0f);
    const std::vector<float> grads = random_floats(total, 20, 0.1f);
    REQUIRE(host.step(*cpu, host_masters.data(), grads.data(), 1e-2, rounded(host_weights)).ok());
    REQUIRE(
        resumed.step(*device, resumed_weights.data(), grads.data(), 1e-2, rounded(resumed_weights))
            .ok());
    const std::vector<float>& after = mixed ? host_weights : host_masters;
    CHECK(std::vector<float>(resumed_weights.begin() + begin, resumed_weights.begin() + end) ==
          std::vector<float>(after.begin() + begin, after.begin() + end));
    CHECK(moments_of(resumed, n) == moments_of(host, n));
    // What it holds on the device: masters, moments and a chunk's staging.
    CHECK(resumed.state_bytes() == (3 * n + (mixed ? 2 : 1) * kChunk) * 4);
  }
}

}  // namespace
}  // namespace dslaunch::worker::engine
