// AdamW with its states on a device (AdamW::place_on_device) takes the steps
// the same optimizer takes in host memory, bit for bit: a chunk at a time,
// on whole or partitioned gradients, on a slice of the layout that starts
// mid-tensor, with resumed moments, and with a share of its states in host
// memory (partial offload). The device is the emulator's guarded memory,
// which faults on any host access to it.
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

// A device's weights and (16-bit training) the optimizer's own masters,
// from `initial`; the first `host_count` floats' states in host memory.
struct OnDevice {
  OnDevice(kernels::Backend& device, const core::ParameterTable& table, int64_t begin, int64_t end,
           const std::vector<float>& initial, core::DType precision, int64_t chunk,
           kernels::Backend* host = nullptr, int64_t host_count = 0)
      : optimizer(adamw_spec(), table, begin, end),
        weights(device, table.total()),
        mixed(precision != core::DType::kF32),
        precision(precision) {
    device.copy_host_to_device(weights.data(), initial.data(), weights.bytes());
    optimizer.place_on_device(device, mixed ? nullptr : weights.data(), chunk, host, host_count);
    optimizer.set_masters(0, end - begin, initial.data() + begin);
  }
  RoundedCopy rounded() { return mixed ? RoundedCopy{weights.data(), precision} : RoundedCopy{}; }

  AdamW optimizer;
  kernels::DeviceBuffer<float> weights;
  bool mixed;
  core::DType precision;
};

TEST_CASE("AdamW on a device steps as in host memory, on whole or partitioned gradients") {
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
  const auto to_host = [&](const float* data, int64_t count) {
    std::vector<float> host(count);
    device->copy_device_to_host(host.data(), data, count * 4);
    return host;
  };

  for (const core::DType precision : {core::DType::kF32, core::DType::kBF16}) {
    INFO(core::dtype_name(precision));
    const bool mixed = precision != core::DType::kF32;
    // In host memory: masters (the weights in fp32) and, in 16-bit
    // training, the weights they round to.
    AdamW host(adamw_spec(), table, begin, end);
    std::vector<float> host_masters = initial;
    std::vector<float> host_weights(total, 0.0f);
    const auto host_rounded = [&] {
      return mixed ? RoundedCopy{host_weights.data(), precision} : RoundedCopy{};
    };
    // On the device: one reading the whole layout's gradients (ZeRO stages
    // 0-1), one its partition's only (stage 2); one with the states of its
    // first 2.5 chunks in host memory, CPU Adam stepping them.
    const int64_t host_count = 5 * kChunk / 2;
    OnDevice whole(*device, table, begin, end, initial, precision, kChunk);
    OnDevice partition(*device, table, begin, end, initial, precision, kChunk);
    OnDevice twin(*device, table, begin, end, initial, precision, kChunk, cpu.get(), host_count);
    CHECK(whole.optimizer.moment_group() == kChunk);
    kernels::DeviceBuffer<float> device_grads(*device, total);

    for (int step = 0; step < 3; ++step) {
      INFO("step " << step);
      const std::vector<float> grads = random_floats(total, 10 + step, 0.1f);
      REQUIRE(host.step(*cpu, host_masters.data(), grads.data(), 1e-2, host_rounded()).ok());
      device->copy_host_to_device(device_grads.data(), grads.data(), total * 4);
      REQUIRE(whole.optimizer
                  .step(*device, whole.weights.data(), device_grads.data(), 1e-2, whole.rounded())
                  .ok());
      device->copy_host_to_device(device_grads.data(), grads.data() + begin, n * 4);
      REQUIRE(partition.optimizer
                  .step_partition(*device, partition.weights.data(), device_grads.data(), 1e-2,
                                  partition.rounded())
                  .ok());
      REQUIRE(twin.optimizer
                  .step_partition(*device, twin.weights.data(), device_grads.data(), 1e-2,
                                  twin.rounded())
                  .ok());
    }
    // What the model reads next, over the slice; outside it the device
    // wrote nothing.
    const std::vector<float>& expected = mixed ? host_weights : host_masters;
    for (OnDevice* on : {&whole, &partition, &twin}) {
      const std::vector<float> weights = to_host(on->weights.data(), total);
      for (int64_t i = begin; i < end; ++i) {
        if (weights[i] != expected[i]) {
          FAIL("weight " << i << ": " << weights[i] << " on the device, " << expected[i]
                         << " in host memory");
        }
      }
      CHECK(weights[begin - 1] == initial[begin - 1]);
      CHECK(weights[end] == initial[end]);
      // The masters and moments a checkpoint reads.
      std::vector<float> masters(n);
      on->optimizer.read_masters(0, n, masters.data());
      CHECK(masters ==
            std::vector<float>(host_masters.begin() + begin, host_masters.begin() + end));
      CHECK(moments_of(on->optimizer, n) == moments_of(host, n));
    }

    // Resumed: the masters from the checkpoint's, the moments set a chunk
    // at a time; one more step matches.
    OnDevice resumed(*device, table, begin, end, host_masters, precision, kChunk);
    OnDevice resumed_twin(*device, table, begin, end, host_masters, precision, kChunk, cpu.get(),
                          host_count);
    const std::vector<float> moments = moments_of(host, n);
    for (OnDevice* on : {&resumed, &resumed_twin}) {
      // (The host's share ends inside a chunk: that piece is set on both sides.)
      for (int64_t from = 0; from < n; from += on->optimizer.moment_group()) {
        const int64_t count = std::min(on->optimizer.moment_group(), n - from);
        REQUIRE(
            on->optimizer.set_moments(from, count, moments.data() + from, moments.data() + n + from)
                .ok());
      }
      on->optimizer.set_steps_taken(host.steps_taken());
    }
    const std::vector<float> grads = random_floats(total, 20, 0.1f);
    REQUIRE(host.step(*cpu, host_masters.data(), grads.data(), 1e-2, host_rounded()).ok());
    device->copy_host_to_device(device_grads.data(), grads.data(), total * 4);
    for (OnDevice* on : {&resumed, &resumed_twin}) {
      REQUIRE(
          on->optimizer.step(*device, on->weights.data(), device_grads.data(), 1e-2, on->rounded())
              .ok());
      const std::vector<float> resumed_weights = to_host(on->weights.data(), total);
      CHECK(std::vector<float>(resumed_weights.begin() + begin, resumed_weights.begin() + end) ==
            std::vector<float>(expected.begin() + begin, expected.begin() + end));
      CHECK(moments_of(on->optimizer, n) == moments_of(host, n));
    }
    // What it holds on the device: the moments, and in 16-bit training the
    // masters (in fp32 they are the weights); of the host's share, in host
    // memory, masters and moments, and a chunk's gradients and weights.
    CHECK(resumed.optimizer.state_bytes() == (mixed ? 3 : 2) * n * 4);
    CHECK(resumed.optimizer.host_state_bytes() == 0);
    CHECK(resumed_twin.optimizer.state_bytes() == (mixed ? 3 : 2) * (n - host_count) * 4);
    CHECK(resumed_twin.optimizer.host_state_bytes() == (3 * host_count + 2 * kChunk) * 4);
  }
}

}  // namespace
}  // namespace dslaunch::worker::engine
