#include "launcher/plan/memory_estimate.h"

#include <cstdint>

#include <catch2/catch.hpp>

#include <utility>

#include "core/spec/job_spec.h"

namespace dslaunch::plan {
namespace {

spec::ParallelismSpec parallel(
    int tensor, int pipeline,
    spec::PipelinePartition partition = spec::PipelinePartition::kUniform) {
  spec::ParallelismSpec parallelism;
  parallelism.tensor = tensor;
  parallelism.pipeline = pipeline;
  parallelism.pipeline_partition = partition;
  return parallelism;
}

enum class Precision { kFp32, kFp16, kBf16 };

spec::TrainingSpec training(Precision precision, int zero_stage) {
  spec::TrainingSpec training;
  training.fp16.enabled = precision == Precision::kFp16;
  training.bf16 = precision == Precision::kBf16;
  training.zero.stage = zero_stage;
  return training;
}

void check_bytes(const ModelStateBytes& bytes, int64_t parameters, int64_t gradients,
                 int64_t optimizer_states, int64_t weight_copy = 0) {
  CHECK(bytes.parameters == parameters);
  CHECK(bytes.gradients == gradients);
  CHECK(bytes.optimizer_states == optimizer_states);
  CHECK(bytes.weight_copy == weight_copy);
  CHECK(bytes.device_total() == parameters + gradients + optimizer_states + weight_copy);
  CHECK(bytes.offloaded_to_host == 0);
  CHECK(bytes.offloaded_to_nvme == 0);
}

}  // namespace

TEST_CASE("GPT-2 small has 124,439,808 parameters") {
  // Embeddings 50257 x 768 + 1024 x 768, 12 layers of 12h^2 + 13h, final layernorm 2h.
  CHECK(total_parameters(spec::ModelSpec{}) == 124'439'808);
}

TEST_CASE("the vocabulary is padded to a multiple of divisible_by times the tensor size") {
  const spec::ModelSpec model;  // vocab 50257, divisible by 128
  CHECK(padded_vocab_size(model, 1) == 50'304);
  CHECK(padded_vocab_size(model, 2) == 50'432);
  CHECK(padded_vocab_size(model, 4) == 50'688);

  spec::ModelSpec byte_level;
  byte_level.vocab_size = 256;
  byte_level.make_vocab_size_divisible_by = 64;
  CHECK(padded_vocab_size(byte_level, 1) == 256);  // already a multiple: unchanged
  CHECK(padded_vocab_size(byte_level, 8) == 512);
}

TEST_CASE("one rank without model parallelism holds the whole model with the padded vocabulary") {
  const spec::ModelSpec model;
  // 124,439,808 + (50304 - 50257) x 768.
  CHECK(parameters_per_rank(model, parallel(1, 1), 0) == 124'475'904);
}

TEST_CASE("tensor and pipeline parallelism split the layers and embeddings as Megatron does") {
  const spec::ModelSpec model;
  // Per layer (12h^2 + 7h) / 2 + 6h = 3,546,240; 6 layers a stage = 21,277,440.
  // Word embedding 50432 x 768 / 2 = 19,365,888 on both stages (tied copy on the last).
  // Stage 0: + position embedding 1024 x 768 = 786,432.
  CHECK(parameters_per_rank(model, parallel(2, 2), 0) == 41'429'760);
  // Stage 1: + final layernorm 2 x 768.
  CHECK(parameters_per_rank(model, parallel(2, 2), 1) == 40'644'864);

  // Middle stages hold layers only: 3 layers of 12h^2 + 13h.
  CHECK(parameters_per_rank(model, parallel(1, 4), 1) == 3 * 7'087'872);
  CHECK(parameters_per_rank(model, parallel(1, 4), 2) == 3 * 7'087'872);

  // Balanced by parameters (the default), the embedding stages hold one
  // block and the middle ones the other ten.
  const spec::ParallelismSpec balanced = parallel(1, 4, spec::PipelinePartition::kParameters);
  CHECK(stage_layers(model, balanced).front() == std::pair{0, 1});
  CHECK(stage_layers(model, balanced).back() == std::pair{11, 12});
  CHECK(parameters_per_rank(model, balanced, 1) + parameters_per_rank(model, balanced, 2) ==
        10 * 7'087'872);
}

TEST_CASE("fp32 Adam holds 4+4+8 bytes per parameter, partitioned by each ZeRO stage") {
  const int64_t psi = 1'000'000;
  check_bytes(model_state_bytes(psi, training(Precision::kFp32, 0), 4), 4'000'000, 4'000'000,
              8'000'000);
  check_bytes(model_state_bytes(psi, training(Precision::kFp32, 1), 4), 4'000'000, 4'000'000,
              2'000'000);
  check_bytes(model_state_bytes(psi, training(Precision::kFp32, 2), 4), 4'000'000, 1'000'000,
              2'000'000);
  check_bytes(model_state_bytes(psi, training(Precision::kFp32, 3), 4), 1'000'000, 1'000'000,
              2'000'000);
}

TEST_CASE("mixed-precision Adam holds 2+2+12 bytes per parameter, fp16 and bf16 alike") {
  const int64_t psi = 1'000'000;
  for (const Precision precision : {Precision::kFp16, Precision::kBf16}) {
    INFO("precision " << static_cast<int>(precision));
    check_bytes(model_state_bytes(psi, training(precision, 0), 4), 2'000'000, 2'000'000,
                12'000'000);
    check_bytes(model_state_bytes(psi, training(precision, 1), 4), 2'000'000, 2'000'000, 3'000'000);
    check_bytes(model_state_bytes(psi, training(precision, 2), 4), 2'000'000, 500'000, 3'000'000);
    check_bytes(model_state_bytes(psi, training(precision, 3), 4), 500'000, 500'000, 3'000'000);
  }
}

TEST_CASE("on the CPU backend 16-bit weights and gradients are held widened to fp32") {
  const int64_t psi = 1'000'000;
  for (const Precision precision : {Precision::kFp16, Precision::kBf16}) {
    // bf16's products keep a 16-bit copy of the whole weights at stages
    // 0-2; fp16's multiply on sgemm, without one.
    const int64_t copy = precision == Precision::kBf16 ? 2'000'000 : 0;
    check_bytes(model_state_bytes(psi, training(precision, 0), 4, spec::Device::kCpu), 4'000'000,
                4'000'000, 12'000'000, copy);
    check_bytes(model_state_bytes(psi, training(precision, 1), 4, spec::Device::kCpu), 4'000'000,
                4'000'000, 3'000'000, copy);
    check_bytes(model_state_bytes(psi, training(precision, 2), 4, spec::Device::kCpu), 4'000'000,
                1'000'000, 3'000'000, copy);
    check_bytes(model_state_bytes(psi, training(precision, 3), 4, spec::Device::kCpu), 1'000'000,
                1'000'000, 3'000'000);
    // Stage 3 on one rank keeps whole weights, unless they go to NVMe.
    spec::TrainingSpec alone = training(precision, 3);
    check_bytes(model_state_bytes(psi, alone, 1, spec::Device::kCpu), 4'000'000, 4'000'000,
                12'000'000, copy);
    alone.zero.offload_param.device = spec::OffloadDevice::kNvme;
    CHECK(model_state_bytes(psi, alone, 1, spec::Device::kCpu).weight_copy == 0);
  }
  check_bytes(model_state_bytes(psi, training(Precision::kFp32, 1), 4, spec::Device::kCpu),
              4'000'000, 4'000'000, 2'000'000);
}

TEST_CASE("the compressed optimizers' error feedback and extra copies count in the plan") {
  spec::TrainingSpec training;
  const int64_t psi = 1'000'000;
  const int64_t adam = model_state_bytes(psi, training, 4, spec::Device::kCpu).optimizer_states;
  CHECK(adam == psi * 8);
  training.optimizer.type = spec::OptimizerType::kOneBitAdam;
  CHECK(model_state_bytes(psi, training, 4, spec::Device::kCpu).optimizer_states ==
        adam + (psi + psi / 4) * 4);
  // One rank compresses nothing and keeps no errors.
  CHECK(model_state_bytes(psi, training, 1, spec::Device::kCpu).optimizer_states == adam);
  training.optimizer.type = spec::OptimizerType::kZeroOneAdam;
  CHECK(model_state_bytes(psi, training, 4, spec::Device::kCpu).optimizer_states ==
        adam + (psi + psi / 4) * 4 + 2 * psi * 4);
  training.optimizer.type = spec::OptimizerType::kOneBitLamb;
  CHECK(model_state_bytes(psi, training, 4, spec::Device::kCpu).optimizer_states ==
        adam + (psi + psi / 4) * 4 + 2 * psi * 4);
}

TEST_CASE("ZeRO partitions round up") {
  // 10 parameters over 4 ranks: partitions of 3.
  check_bytes(model_state_bytes(10, training(Precision::kFp32, 1), 4), 40, 40, 24);
  check_bytes(model_state_bytes(10, training(Precision::kFp32, 3), 4), 12, 12, 24);
  check_bytes(model_state_bytes(10, training(Precision::kFp16, 3), 4), 6, 6, 36);
}

TEST_CASE("the ZeRO paper's 7.5B-parameter model on 64 GPUs") {
  // Figure 1 of Rajbhandari et al.: 120 GB, 31.4 GB, 16.6 GB and 1.9 GB per GPU.
  const int64_t psi = 7'500'000'000;
  const auto total = [&](int stage) {
    return model_state_bytes(psi, training(Precision::kFp16, stage), 64).device_total();
  };
  CHECK(total(0) == 120'000'000'000);
  CHECK(total(1) == 31'406'250'000);
  CHECK(total(2) == 16'640'625'000);
  CHECK(total(3) == 1'875'000'000);
}

TEST_CASE("optimizer offload to the CPU moves the optimizer partition to host memory") {
  spec::TrainingSpec offload = training(Precision::kBf16, 2);
  offload.zero.offload_optimizer.device = spec::OffloadDevice::kCpu;
  const ModelStateBytes bytes = model_state_bytes(1'000'000, offload, 4);
  CHECK(bytes.parameters == 2'000'000);
  CHECK(bytes.gradients == 500'000);
  CHECK(bytes.optimizer_states == 0);
  CHECK(bytes.offloaded_to_host == 3'000'000);
  CHECK(bytes.offloaded_to_nvme == 0);
  CHECK(bytes.device_total() == 2'500'000);
  // Partial offload: a quarter of the states to host memory, the rest stays.
  offload.zero.offload_optimizer.ratio = 0.25;
  const ModelStateBytes partial = model_state_bytes(1'000'000, offload, 4);
  CHECK(partial.offloaded_to_host == 750'000);
  CHECK(partial.optimizer_states == 2'250'000);
  CHECK(partial.device_total() == 2'000'000 + 500'000 + 2'250'000);
}

TEST_CASE("optimizer offload to NVMe keeps its swap buffers in memory, and takes the gradients") {
  spec::TrainingSpec offload = training(Precision::kFp32, 2);
  offload.zero.offload_optimizer.device = spec::OffloadDevice::kNvme;
  offload.zero.sub_group_size = 100'000;
  offload.zero.offload_optimizer.buffer_count = 3;
  // 1M parameters over 4 ranks: 250,000 each, three groups of 100,000; the
  // gradients' partition goes to NVMe with the moments.
  ModelStateBytes bytes = model_state_bytes(1'000'000, offload, 4);
  CHECK(bytes.optimizer_states == 0);
  CHECK(bytes.gradients == 0);
  CHECK(bytes.offloaded_to_nvme == 2'000'000 + 1'000'000);
  const int64_t moment = (400'000 + 4095) / 4096 * 4096;  // 100,000 floats, aligned
  CHECK(bytes.swap_buffers == 3 * 2 * moment);
  CHECK(bytes.device_total() == bytes.parameters + 3 * 2 * moment);
  // Whole gradients (stage 1, or stage 2 on one rank) stay in memory.
  for (const auto& [stage, ranks] : {std::pair{1, 4}, std::pair{2, 1}}) {
    INFO("stage " << stage << " on " << ranks << " ranks");
    offload.zero.stage = stage;
    CHECK(model_state_bytes(1'000'000, offload, ranks).gradients == 4'000'000);
  }
  offload.zero.stage = 2;
  // No more buffers than groups, and no group larger than the partition.
  offload.zero.sub_group_size = 1'000'000'000;
  bytes = model_state_bytes(1'000'000, offload, 4);
  CHECK(bytes.swap_buffers == 2 * ((1'000'000 + 4095) / 4096 * 4096));

  // 16-bit training: the fp32 masters go with the moments and the gradients
  // where those are partitioned, and stay in memory where they are not.
  spec::TrainingSpec mixed = training(Precision::kBf16, 2);
  mixed.zero.offload_optimizer.device = spec::OffloadDevice::kNvme;
  bytes = model_state_bytes(1'000'000, mixed, 4, spec::Device::kCpu);
  CHECK(bytes.optimizer_states == 0);
  CHECK(bytes.gradients == 0);
  CHECK(bytes.offloaded_to_nvme == 2'000'000 + 1'000'000 + 1'000'000);
  mixed.zero.stage = 1;
  bytes = model_state_bytes(1'000'000, mixed, 4, spec::Device::kCpu);
  CHECK(bytes.optimizer_states == 1'000'000);
  CHECK(bytes.offloaded_to_nvme == 2'000'000);
}

TEST_CASE("parameter offload to NVMe at stage 3 moves the parameter partition to NVMe") {
  spec::TrainingSpec offload = training(Precision::kFp16, 3);
  offload.zero.offload_param.device = spec::OffloadDevice::kNvme;
  const ModelStateBytes bytes = model_state_bytes(1'000'000, offload, 4);
  CHECK(bytes.parameters == 0);
  CHECK(bytes.gradients == 500'000);
  CHECK(bytes.optimizer_states == 3'000'000);
  CHECK(bytes.offloaded_to_host == 0);
  CHECK(bytes.offloaded_to_nvme == 500'000);
  CHECK(bytes.device_total() == 3'500'000);

  offload.zero.offload_optimizer.device = spec::OffloadDevice::kCpu;
  const ModelStateBytes both = model_state_bytes(1'000'000, offload, 4);
  CHECK(both.device_total() == 500'000);
  CHECK(both.offloaded_to_host == 3'000'000);
  CHECK(both.offloaded_to_nvme == 500'000);
}

TEST_CASE("the GPU path holds fp32 parameters and whole gradients on the GPU, the rest in host") {
  const int64_t psi = 1'000'000;
  for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
    const bool mixed = precision != Precision::kFp32;
    for (const int stage : {1, 2}) {
      INFO("stage " << stage << (mixed ? " bf16" : " fp32"));
      spec::TrainingSpec offloaded = training(precision, stage);
      offloaded.zero.offload_optimizer.device = spec::OffloadDevice::kCpu;
      const ModelStateBytes bytes = mirrored_state_bytes(psi, offloaded, 4);
      CHECK(bytes.parameters == 4'000'000);
      CHECK(bytes.gradients == 4'000'000);
      CHECK(bytes.optimizer_states == 0);
      CHECK(bytes.weight_copy == 0);
      // Host: the fp32 parameters, the gradients the CPU engine keeps
      // (whole at stage 1, this rank's quarter at stage 2), the moments and
      // masters of its quarter.
      const int64_t gradients = stage == 1 ? 4'000'000 : 1'000'000;
      CHECK(bytes.offloaded_to_host == 4'000'000 + gradients + (mixed ? 3'000'000 : 2'000'000));
      CHECK(bytes.offloaded_to_nvme == 0);
      CHECK(bytes.device_total() == 8'000'000);
    }
  }
}

TEST_CASE("partial offload keeps the rest of the optimizer's states on the GPU") {
  const int64_t psi = 1'000'000;  // a quarter each over 4 ranks: 250,000 floats
  for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
    const bool mixed = precision != Precision::kFp32;
    INFO((mixed ? "bf16" : "fp32"));
    spec::TrainingSpec partial = training(precision, 3);
    partial.zero.offload_optimizer.device = spec::OffloadDevice::kCpu;
    partial.zero.offload_optimizer.ratio = 0.4;
    spec::TrainingSpec on_gpu = training(precision, 3);
    const ModelStateBytes all = mirrored_state_bytes(psi, on_gpu, 4);
    const ModelStateBytes bytes = mirrored_state_bytes(psi, partial, 4);
    // The GPU as without offload, but for the 100,000 floats in host memory:
    // their fp32 masters and moments, and a chunk's gradients and weights.
    CHECK(bytes.parameters == all.parameters);
    CHECK(bytes.gradients == all.gradients);
    CHECK(bytes.communication_buffers == all.communication_buffers);
    CHECK(bytes.optimizer_states == (mixed ? 12 : 8) * 150'000);
    CHECK(all.optimizer_states == (mixed ? 12 : 8) * 250'000);
    CHECK(bytes.offloaded_to_host == 12 * 100'000 + 8 * 100'000);
    CHECK(all.offloaded_to_host == 0);
    CHECK(bytes.offloaded_to_nvme == 0);
    // Ratio 1 offloads them whole (the mirror): none on the GPU.
    partial.zero.offload_optimizer.ratio = 1;
    CHECK(mirrored_state_bytes(psi, partial, 4).optimizer_states == 0);
  }
}

}  // namespace dslaunch::plan
