// 3D parallelism changes nothing but where the work runs: with the same
// global batch, tensor groups (Megatron's), pipeline stages running 1F1B and
// data parallelism under every ZeRO stage allowed, in combination and with
// activation checkpointing, train to the losses of one rank, step by step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "core/status.h"
#include "kernels/backend.h"
#include "launcher/plan/memory_estimate.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker::engine {
namespace {

struct Run {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::vector<double> eval_losses;
  std::vector<float> params;
  std::vector<double> stage_waits;  // the last step's, per stage
  MemoryReport memory;              // this rank's
};

// The tiny job with 4 blocks and 4 heads (2 and 4 tensor ranks or pipeline
// stages split them), 20 steps of a global batch of 8 sequences in
// micro-batches of 1: enough micro-batches for 1F1B on every layout of up
// to 8 ranks.
spec::JobSpec job_3d(const std::string& dir) {
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.model.num_layers = 4;
  spec.model.num_attention_heads = 4;
  spec.training.steps = 20;
  spec.training.scheduler.total_num_steps = 20;
  return spec;
}

Run train_on(const comm::ProcessGroups* groups, spec::JobSpec spec) {
  comm::Communicator& data =
      groups != nullptr ? groups->data() : comm::testing::solo_data_comm();
  spec.training.batch.micro_batch_per_gpu = 1;
  spec.training.batch.train_batch_size = 8;
  spec.training.batch.gradient_accumulation_steps = 8 / data.size();
  const data::TrainingData training_data =
      data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(training_data.error == "");
  auto backend = kernels::make_cpu_backend(1);
  Run run;
  TrainerOptions options;
  options.data_comm = &data;
  if (groups != nullptr) {
    options.tensor_comm = &groups->tensor();
    options.pipeline_comm = &groups->pipeline();
  }
  options.on_memory = [&run](const MemoryReport& memory) { run.memory = memory; };
  options.on_step = [&run](const StepReport& report) {
    run.losses.push_back(report.loss);
    run.grad_norms.push_back(report.grad_norm);
    if (report.eval_loss) run.eval_losses.push_back(*report.eval_loss);
    run.stage_waits = report.stage_wait_seconds;
  };
  TrainResult result = train(spec, training_data, *backend, options);
  INFO(result.error);
  REQUIRE(result.error == "");
  run.params = std::move(result.params);
  return run;
}

double worst_relative(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(b[i]));
  }
  return worst;
}

void check_matches(const Run& parallel, const Run& single, const spec::ModelSpec& model) {
  CHECK(parallel.losses.size() == 20);
  INFO("largest relative loss difference: " << worst_relative(parallel.losses, single.losses));
  CHECK(worst_relative(parallel.losses, single.losses) < 1e-5);
  INFO("largest relative gradient-norm difference: "
       << worst_relative(parallel.grad_norms, single.grad_norms));
  CHECK(worst_relative(parallel.grad_norms, single.grad_norms) < 1e-4);
  CHECK(worst_relative(parallel.eval_losses, single.eval_losses) < 1e-5);
  REQUIRE(parallel.params.size() == single.params.size());
  const double worst_param =
      testing::param_difference(parallel.params, single.params, model).learning;
  INFO("largest parameter difference: " << worst_param);
  CHECK(worst_param < 1e-5);
}

// The model states a rank of pipeline stage `stage` holds are what `dslaunch
// plan` estimates for it (within ZeRO's partition padding), and its
// activations what the plan counts, to the byte (micro-batches of 1, a
// global batch of 8).
void check_memory_as_planned(const MemoryReport& memory, const spec::JobSpec& spec, int stage,
                             int data) {
  const plan::ModelStateBytes planned =
      plan::model_state_bytes(plan::parameters_per_rank(spec.model, spec.parallelism, stage),
                              spec.training, data, spec.cluster.device);
  // The plan counts bf16's weight copy whatever the CPU; it is kept where
  // oneDNN multiplies bf16.
  const double estimate = static_cast<double>(
      planned.device_total() - (testing::bf16_weight_copy_kept() ? 0 : planned.weight_copy));
  const double measured = static_cast<double>(memory.parameters + memory.gradients +
                                              memory.optimizer_states + memory.weight_copy);
  INFO("stage " << stage << ": measured " << measured << " bytes, estimated " << estimate);
  CHECK(measured == Approx(estimate).epsilon(0.02));
  CHECK(memory.activations == plan::activation_bytes_per_rank(spec.model, spec.parallelism,
                                                              spec.training, 1, 8 / data, stage,
                                                              spec::Device::kCpu));
}

struct Layout {
  int pipeline, data, tensor, zero_stage;
  spec::PipelinePartition partition;
  std::vector<int> stage_layers;
  bool checkpoint_activations = false;  // with partitioned activations
};

TEST_CASE("tensor, pipeline and data layouts, with and without activation checkpointing, train "
          "to one rank's losses") {
  const int world = comm::testing::world_size();
  const std::string dir = testing::shared_token_files(comm::testing::world_groups().data());
  spec::JobSpec spec = job_3d(dir);
  const Run single = train_on(nullptr, spec);
  CHECK(single.losses.back() < 0.9 * single.losses.front());
  // Every (pipeline, data, tensor) in {1, 2, 4}^3 that makes up the world,
  // each without and with activation checkpointing (partitioned), the ZeRO
  // stages allowed taking turns (0-3 without a pipeline, 0-1 with one), and
  // so do the pipeline partitions.
  using P = spec::PipelinePartition;
  std::vector<Layout> layouts;
  int turn = 0;
  for (const int tensor : {1, 2, 4}) {
    for (const int pipeline : {1, 2, 4}) {
      const int data = world / (tensor * pipeline);
      if (data * tensor * pipeline != world || (data != 1 && data != 2 && data != 4)) continue;
      for (const bool checkpoint : {false, true}) {
        Layout layout{pipeline, data, tensor, turn % (pipeline > 1 ? 2 : 4), P::kParameters, {}};
        layout.checkpoint_activations = checkpoint;
        if (pipeline > 1 && turn % 3 == 1) layout.partition = P::kUniform;
        if (pipeline > 1 && turn % 3 == 2) {
          layout.partition = P::kExplicit;
          layout.stage_layers = pipeline == 2 ? std::vector<int>{3, 1} : std::vector<int>{1, 1, 1, 1};
        }
        layouts.push_back(layout);
        ++turn;
      }
    }
  }
  for (const Layout& layout : layouts) {
    INFO("pipeline " << layout.pipeline << " x data " << layout.data << " x tensor "
                     << layout.tensor << ", ZeRO " << layout.zero_stage
                     << (layout.checkpoint_activations ? ", activation checkpointing" : ""));
    comm::ProcessGroups& groups =
        comm::testing::groups_of({layout.pipeline, layout.data, layout.tensor});
    spec.parallelism.pipeline = layout.pipeline;
    spec.parallelism.tensor = layout.tensor;
    spec.parallelism.pipeline_partition = layout.partition;
    spec.parallelism.stage_layers = layout.stage_layers;
    spec.training.zero.stage = layout.zero_stage;
    // Stage 3 keeps no tensor whole, as the plan's formula counts it.
    spec.training.zero.param_persistence_threshold = 0;
    spec.training.activation_checkpointing.enabled = layout.checkpoint_activations;
    spec.training.activation_checkpointing.partition_activations = layout.checkpoint_activations;
    const Run parallel = train_on(&groups, spec);
    check_matches(parallel, single, spec.model);
    // Every stage's wait for its neighbours is reported: the later stages
    // wait for the first forward, the earlier ones for the first backward.
    REQUIRE(parallel.stage_waits.size() ==
            static_cast<size_t>(layout.pipeline > 1 ? layout.pipeline : 0));
    for (const double wait : parallel.stage_waits) CHECK(wait > 0);
    check_memory_as_planned(parallel.memory, spec, groups.coord().pipeline, layout.data);
  }
  REQUIRE(comm::testing::world_groups().world().barrier()->wait().ok());
  if (comm::testing::world_rank() == 0) std::filesystem::remove_all(dir);
}

// bf16 and fp16 under every (pipeline, data, tensor) layout of the world:
// each rank rounds its own partial gradients to 16 bits, so the layouts are
// not one rank's bits, but follow one rank's 16-bit run closely; the fp32
// masters are counted as the plan counts them.
TEST_CASE("16-bit training under tensor, pipeline and data layouts follows one rank's") {
  const int world = comm::testing::world_size();
  const std::string dir = testing::shared_token_files(comm::testing::world_groups().data());
  spec::JobSpec spec = job_3d(dir);
  spec.training.zero.param_persistence_threshold = 0;
  int turn = 0;
  for (const bool fp16 : {false, true}) {
    spec.training.bf16 = !fp16;
    spec.training.fp16.enabled = fp16;
    spec.parallelism = {};
    spec.training.zero.stage = 0;
    const Run single = train_on(nullptr, spec);
    for (const int tensor : {1, 2, 4}) {
      for (const int pipeline : {1, 2, 4}) {
        const int data = world / (tensor * pipeline);
        if (data * tensor * pipeline != world || (data != 1 && data != 2 && data != 4)) continue;
        const int zero_stage = turn++ % (pipeline > 1 ? 2 : 4);
        INFO((fp16 ? "fp16" : "bf16") << ", pipeline " << pipeline << " x data " << data
                                      << " x tensor " << tensor << ", ZeRO " << zero_stage);
        comm::ProcessGroups& groups = comm::testing::groups_of({pipeline, data, tensor});
        spec.parallelism.pipeline = pipeline;
        spec.parallelism.tensor = tensor;
        spec.training.zero.stage = zero_stage;
        const Run parallel = train_on(&groups, spec);
        INFO(
            "largest relative loss difference: " << worst_relative(parallel.losses, single.losses));
        // Measured: at most 3.4e-3 (a bf16 layout), most under 5e-5; the
        // evaluation losses within 2.5e-4.
        CHECK(worst_relative(parallel.losses, single.losses) < 1e-2);
        CHECK(worst_relative(parallel.eval_losses, single.eval_losses) < 1e-3);
        CHECK(parallel.losses.back() < 0.9 * parallel.losses.front());
        check_memory_as_planned(parallel.memory, spec, groups.coord().pipeline, data);
      }
    }
  }
  REQUIRE(comm::testing::world_groups().world().barrier()->wait().ok());
  if (comm::testing::world_rank() == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("the compressed optimizers work over the data axis of tensor and pipeline layouts") {
  const int world = comm::testing::world_size();
  const std::string dir = testing::shared_token_files(comm::testing::world_groups().data());
  spec::JobSpec spec = job_3d(dir);
  spec.training.optimizer.freeze_step = 10;
  spec.training.optimizer.var_freeze_step = 10;
  spec.training.optimizer.var_update_scaler = 2;
  for (const spec::OptimizerType type :
       {spec::OptimizerType::kOneBitAdam, spec::OptimizerType::kZeroOneAdam,
        spec::OptimizerType::kOneBitLamb}) {
    spec.training.optimizer.type = type;
    // LAMB moves each tensor by lr times its norm: a larger rate to learn in 20 steps.
    spec.training.optimizer.lr = type == spec::OptimizerType::kOneBitLamb ? 0.05 : 3e-3;
    spec.parallelism = {};
    const Run single = train_on(nullptr, spec);
    for (const auto& [pipeline, tensor] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
      const int data = world / (tensor * pipeline);
      if (data < 2 || data * tensor * pipeline != world) continue;
      INFO("optimizer " << static_cast<int>(type) << ", pipeline " << pipeline << " x data " << data
                        << " x tensor " << tensor);
      comm::ProcessGroups& groups = comm::testing::groups_of({pipeline, data, tensor});
      spec.parallelism.pipeline = pipeline;
      spec.parallelism.tensor = tensor;
      const Run parallel = train_on(&groups, spec);
      // 1-bit Adam's warm-up averages at full precision: one rank's losses.
      if (type == spec::OptimizerType::kOneBitAdam) {
        const std::vector<double> warm(parallel.losses.begin(), parallel.losses.begin() + 10);
        const std::vector<double> warm_single(single.losses.begin(), single.losses.begin() + 10);
        CHECK(worst_relative(warm, warm_single) < 1e-4);
        check_memory_as_planned(parallel.memory, spec, groups.coord().pipeline, data);
      }
      // Ten compressed steps of a tiny model: it learns on, near one rank's
      // run (which compresses nothing); measured within 7.5%.
      CHECK(parallel.losses.back() < parallel.losses.front());
      CHECK(std::abs(parallel.eval_losses.back() - single.eval_losses.back()) <
            0.1 * single.eval_losses.back());
    }
  }
  REQUIRE(comm::testing::world_groups().world().barrier()->wait().ok());
  if (comm::testing::world_rank() == 0) std::filesystem::remove_all(dir);
}

// Megatron's interleaved schedule: each stage runs several model chunks
// (virtual stages), activations going round the pipeline's ranks once per
// chunk. The same losses as one rank, every chunk's memory as planned.
TEST_CASE("interleaved pipelines (virtual stages), with data and tensor groups, train to one "
          "rank's losses") {
  const int world = comm::testing::world_size();
  const std::string dir = testing::shared_token_files(comm::testing::world_groups().data());
  struct Interleaved {
    int pipeline, data, tensor, virtual_stages, layers, zero_stage;
    spec::PipelinePartition partition;
    bool checkpoint_activations;
  };
  using P = spec::PipelinePartition;
  std::vector<Interleaved> layouts;
  if (world == 2) {
    layouts = {{2, 1, 1, 2, 4, 0, P::kParameters, false},
               {2, 1, 1, 2, 8, 1, P::kExplicit, false},
               {2, 1, 1, 4, 8, 1, P::kUniform, true}};
  } else if (world == 4) {
    layouts = {{2, 2, 1, 2, 4, 1, P::kParameters, false},
               {2, 1, 2, 2, 4, 0, P::kUniform, true},
               {4, 1, 1, 2, 8, 0, P::kUniform, false}};
  } else {
    layouts = {{2, 2, 2, 2, 4, 0, P::kParameters, true},
               {4, 2, 1, 2, 8, 1, P::kUniform, false},
               {2, 4, 1, 4, 8, 0, P::kParameters, false}};
  }
  for (const Interleaved& layout : layouts) {
    INFO("pipeline " << layout.pipeline << " x data " << layout.data << " x tensor "
                     << layout.tensor << ", " << layout.virtual_stages << " virtual stages over "
                     << layout.layers << " blocks, ZeRO " << layout.zero_stage
                     << (layout.checkpoint_activations ? ", activation checkpointing" : ""));
    spec::JobSpec spec = job_3d(dir);
    spec.model.num_layers = layout.layers;
    const Run single = train_on(nullptr, spec);
    comm::ProcessGroups& groups =
        comm::testing::groups_of({layout.pipeline, layout.data, layout.tensor});
    spec.parallelism.pipeline = layout.pipeline;
    spec.parallelism.tensor = layout.tensor;
    spec.parallelism.virtual_stages = layout.virtual_stages;
    spec.parallelism.pipeline_partition = layout.partition;
    // 8 blocks over 2 x 2 virtual stages, unevenly.
    if (layout.partition == P::kExplicit) spec.parallelism.stage_layers = {3, 1, 2, 2};
    spec.training.zero.stage = layout.zero_stage;
    spec.training.activation_checkpointing.enabled = layout.checkpoint_activations;
    spec.training.activation_checkpointing.partition_activations = layout.checkpoint_activations;
    const Run parallel = train_on(&groups, spec);
    check_matches(parallel, single, spec.model);
    REQUIRE(parallel.stage_waits.size() == static_cast<size_t>(layout.pipeline));
    for (const double wait : parallel.stage_waits) CHECK(wait > 0);
    check_memory_as_planned(parallel.memory, spec, groups.coord().pipeline, layout.data);
  }
  REQUIRE(comm::testing::world_groups().world().barrier()->wait().ok());
  if (comm::testing::world_rank() == 0) std::filesystem::remove_all(dir);
}

// The error of training a pipeline of `pipeline` stages (with
// `virtual_stages`) over the world, the rest data parallel, with
// `accumulation` micro-batches of 1 a step.
std::string pipeline_error(int pipeline, int virtual_stages, int64_t accumulation) {
  const std::string dir = testing::shared_token_files(comm::testing::world_groups().data());
  spec::JobSpec spec = job_3d(dir);
  const int data = comm::testing::world_size() / pipeline;
  comm::ProcessGroups& groups = comm::testing::groups_of({pipeline, data, 1});
  spec.parallelism.pipeline = pipeline;
  spec.parallelism.virtual_stages = virtual_stages;
  spec.training.batch.micro_batch_per_gpu = 1;
  spec.training.batch.gradient_accumulation_steps = accumulation;
  spec.training.batch.train_batch_size = accumulation * data;
  const data::TrainingData training_data =
      data::open_training_data(spec.data, spec.model.seq_length, "");
  auto backend = kernels::make_cpu_backend(1);
  TrainerOptions options;
  options.data_comm = &groups.data();
  options.pipeline_comm = &groups.pipeline();
  const TrainResult result = train(spec, training_data, *backend, options);
  REQUIRE(comm::testing::world_groups().world().barrier()->wait().ok());
  if (comm::testing::world_rank() == 0) std::filesystem::remove_all(dir);
  return result.error;
}

TEST_CASE("a pipeline with fewer micro-batches per step than stages is refused with the fix") {
  CHECK_THAT(pipeline_error(comm::testing::world_size(), 1, 1),
             Catch::Contains("needs at least") && Catch::Contains("raise train_batch_size"));
}

TEST_CASE("an interleaved pipeline whose micro-batches are no multiple of its stages is refused "
          "with the fix") {
  CHECK_THAT(pipeline_error(2, 2, 3),
             Catch::Contains("virtual_stages 2") && Catch::Contains("make it a multiple of 2"));
}

}  // namespace
}  // namespace dslaunch::worker::engine
