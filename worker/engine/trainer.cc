#include "worker/engine/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "worker/data/consecutive_batch.h"
#include "worker/data/window_sampler.h"
#include "worker/engine/evaluation.h"
#include "worker/engine/lr_schedule.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/zero3_parameters.h"
#include "worker/model/gpt2_model.h"
#include "worker/parallel/gradient_reducer.h"
#include "worker/parallel/releasable_buffer.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Sums `values` over the data group in place, adding the ranks' values in
// rank order. An all-reduce leaves the order to its algorithm, which changes
// with the group's size; a fixed order makes the loss and the gradient norm
// the same bits whatever the ZeRO stage (and from run to run), so sharding
// changes no rounding. "" or what failed.
std::string sum_over_ranks(comm::Communicator& comm, double* values, int count) {
  const int size = comm.size();
  std::vector<double> all(static_cast<size_t>(size) * count);
  auto work = comm.all_gather(comm::buffer_of(values, count),
                              comm::buffer_of(all.data(), static_cast<int64_t>(all.size())),
                              comm::Blocks::consecutive(std::vector<int64_t>(size, count)));
  if (core::Status status = work->wait(); !status.ok()) return status.message();
  for (int i = 0; i < count; ++i) {
    double sum = 0;
    for (int r = 0; r < size; ++r) sum += all[static_cast<size_t>(r) * count + i];
    values[i] = sum;
  }
  return "";
}

// The squared norm of whole gradients, summed partition by partition in rank
// order over `partition`: the same additions a partitioned run makes when
// each rank sums its own partition and sum_over_ranks adds them.
double partitioned_sum_of_squares(kernels::Backend& backend, const float* grads,
                                  const ZeroPartition& partition) {
  double sum = 0;
  for (int r = 0; r < partition.ranks; ++r) {
    sum += backend.sum_of_squares(grads + partition.begin(r), partition.end(r) - partition.begin(r));
  }
  return sum;
}

std::string data_problem(const spec::JobSpec& spec, const data::TrainingData& data, int64_t micro) {
  for (const data::TokenRange* range : {&data.train, &data.valid}) {
    if (range->source->max_token() >= spec.model.vocab_size) {
      return fmt::format(
          "{} holds token {} but model.vocab_size is {}; raise vocab_size to cover "
          "the tokenizer's vocabulary",
          range->source->describe(), range->source->max_token(), spec.model.vocab_size);
    }
  }
  const int64_t T = spec.model.seq_length;
  const int64_t available = data::consecutive_batch_count(data.valid.size(), micro, T);
  if (available < spec.training.eval_batches) {
    return fmt::format(
        "the evaluation data ({} tokens) holds {} batches of {} x {} tokens, fewer than "
        "training.eval_batches ({}); lower eval_batches or give a larger data.valid",
        data.valid.size(), available, micro, T, spec.training.eval_batches);
  }
  return "";
}

}  // namespace

TrainResult train(const spec::JobSpec& spec, const data::TrainingData& data,
                  kernels::Backend& backend, const TrainerOptions& options) {
  TrainResult result;
  comm::Communicator& data_comm = *options.data_comm;
  const int dp_rank = data_comm.rank();
  const int dp_size = data_comm.size();
  const spec::TrainingSpec& training = spec.training;
  spec::BatchSizes batch;
  if (options.batch) {
    batch = *options.batch;
    if (batch.micro_batch_per_gpu < 1 || batch.gradient_accumulation_steps < 1 ||
        batch.train_batch_size != batch.micro_batch_per_gpu * batch.gradient_accumulation_steps *
                                      dp_size) {
      result.error = fmt::format(
          "the plan's batch sizes (train_batch_size {}, micro-batch {}, accumulation {}) do "
          "not fit a data group of {} ranks",
          batch.train_batch_size, batch.micro_batch_per_gpu, batch.gradient_accumulation_steps,
          dp_size);
      return result;
    }
  } else {
    const spec::BatchResolution resolved = spec::resolve_batch_sizes(training.batch, dp_size);
    if (!resolved.sizes) {
      result.error = resolved.error;
      return result;
    }
    batch = *resolved.sizes;
  }
  const int64_t micro = batch.micro_batch_per_gpu;
  const int64_t accumulation = batch.gradient_accumulation_steps;
  const int64_t global_batch = batch.train_batch_size;
  const int64_t T = spec.model.seq_length;
  if (std::string problem = data_problem(spec, data, micro); !problem.empty()) {
    result.error = problem;
    return result;
  }

  const core::ParameterTable table(core::model_config(spec.model, 1));
  result.params.assign(table.total(), 0.0f);
  model::init_gpt2_parameters(table, spec.model.init_seed, result.params.data());
  const int64_t first_step = options.resume ? options.resume->step : 0;
  if (options.resume && options.resume->total_parameters != table.total()) {
    result.error = fmt::format(
        "the checkpoint of step {} holds a model of {} parameters, this spec's has {}",
        options.resume->step, options.resume->total_parameters, table.total());
    return result;
  }
  if (options.resume) {
    // Every rank reads the whole parameters (stage 3 keeps its partition of
    // them below) and, once the optimizer is set up, its moments.
    if (std::string error;
        !core::read_flat_range(options.resume->shards, core::ShardArray::kParams, 0,
                                     table.total(), result.params.data(), error)) {
      result.error = "resuming from the checkpoint of step " +
                     std::to_string(options.resume->step) + ": " + error;
      return result;
    }
  }
  model::Gpt2Model model(table, backend, micro, T);
  // ZeRO stage 1: each rank keeps and updates only its partition of the
  // optimizer states (and of the fp32 weights they update); the updated
  // partitions are then all-gathered. Stage 0 is one partition per rank
  // covering everything.
  const bool sharded = training.zero.stage >= 1 && dp_size > 1;
  const ZeroPartition partition =
      make_zero_partition(table.total(), sharded ? dp_size : 1, kZeroPartitionAlignment);
  // Whole gradients' norm is summed over the partitions ZeRO would use, and
  // checkpoints are cut along them.
  const ZeroPartition norm_partition =
      make_zero_partition(table.total(), dp_size, kZeroPartitionAlignment);
  result.params.resize(partition.padded_total(), 0.0f);
  const int owner = sharded ? dp_rank : 0;
  const int64_t own_begin = partition.begin(owner);
  const int64_t own_count = partition.end(owner) - own_begin;
  AdamW optimizer(training.optimizer, table, own_begin, partition.end(owner));
  if (options.resume) {
    for (const auto& [which, moment] :
         {std::pair{core::ShardArray::kAdamM, optimizer.first_moment()},
          std::pair{core::ShardArray::kAdamV, optimizer.second_moment()}}) {
      if (std::string error; !core::read_flat_range(options.resume->shards, which, own_begin,
                                                          own_begin + own_count, moment, error)) {
        result.error = "resuming from the checkpoint of step " +
                       std::to_string(options.resume->step) + ": " + error;
        return result;
      }
    }
    optimizer.set_steps_taken(first_step);
  }
  // ZeRO stage 2: backward accumulates into a workspace whose buckets are
  // reduce-scattered, as they complete, into this rank's partition of the
  // gradients; the workspace gives their pages back as it goes. Below it,
  // every rank holds the whole averaged gradient.
  const bool partitioned_grads = sharded && training.zero.stage >= 2;
  // ZeRO stage 3: the parameters too; the model reads them from a workspace
  // in which Zero3Parameters gathers each block around its use.
  const bool partitioned_params = sharded && training.zero.stage >= 3;
  std::optional<Zero3Parameters> zero3;
  if (partitioned_params) {
    Zero3Settings settings;
    settings.persistence_threshold = training.zero.param_persistence_threshold;
    settings.prefetch_bucket_size = training.zero.prefetch_bucket_size;
    settings.max_live_parameters = training.zero.max_live_parameters;
    zero3.emplace(data_comm, table, partition, settings, result.params.data());
    if (std::string error = zero3->error(); !error.empty()) {
      result.error = "ZeRO stage 3: " + error;
      return result;
    }
    model.set_parameter_source(&*zero3);
    std::vector<float>().swap(result.params);  // gathered again at the end
  }
  float* const master = partitioned_params ? zero3->master() : result.params.data();
  const float* const model_params = partitioned_params ? zero3->workspace() : master;
  std::vector<float> grads(partitioned_grads ? own_count : table.total(), 0.0f);
  ReleasableBuffer workspace(partitioned_grads ? table.total() : 0);
  if (!workspace.error().empty()) {
    result.error = workspace.error();
    return result;
  }
  float* backward_grads = partitioned_grads ? workspace.data() : grads.data();
  std::optional<GradientReducer> reducer;
  if (partitioned_grads) {
    reducer.emplace(data_comm, workspace, training.zero.reduce_bucket_size, partition,
                    grads.data());
  } else {
    reducer.emplace(data_comm, grads.data(), table.total(),
                    training.zero.reduce_bucket_size);
  }
  data::WindowSamplerResult sampling = data::WindowSampler::create(data.train, T, training.seed);
  if (!sampling.sampler) {
    result.error = "training data: " + sampling.error;
    return result;
  }
  const data::WindowSampler& sampler = *sampling.sampler;

  std::vector<int32_t> inputs(micro * T);
  std::vector<int32_t> targets(micro * T);
  const double tokens_per_step = static_cast<double>(global_batch) * T;
  result.steps = first_step;
  for (int64_t step = first_step; step < training.steps; ++step) {
    if (options.on_step_started) options.on_step_started(step + 1);
    const Clock::time_point start = Clock::now();
    // The stage 2 workspace needs no clearing: the reducer leaves it zero.
    std::memset(grads.data(), 0, grads.size() * sizeof(float));
    double loss_sum = 0;
    for (int64_t m = 0; m < accumulation; ++m) {
      for (int64_t b = 0; b < micro; ++b) {
        const int64_t g =
            data::global_sample_index({step, global_batch, m, dp_size, dp_rank, micro, b});
        sampler.sample(g, inputs.data() + b * T, targets.data() + b * T);
      }
      loss_sum += model.forward(model_params, inputs.data(), targets.data(), micro);
      // Unpartitioned, only the last micro-batch's backward completes the
      // gradients, so only it hands buckets to the reducer; partitioned,
      // every micro-batch's are reduce-scattered (and the workspace cleared).
      const bool reduce = partitioned_grads || m + 1 == accumulation;
      model.backward(model_params, backward_grads, 1.0f / static_cast<float>(accumulation),
                     reduce
                         ? model::Gpt2Model::GradientsReady([&reducer](int64_t begin, int64_t end) {
                             reducer->ready(begin, end);
                           })
                         : model::Gpt2Model::GradientsReady());
      if (partitioned_params) {
        if (std::string error = zero3->error(); !error.empty()) {
          result.error = "ZeRO stage 3: " + error;
          return result;
        }
      }
      if (!reduce) continue;
      if (core::Status error = reducer->finish(); !error.ok()) {
        result.error = (partitioned_grads ? "gradient reduce-scatter: " : "gradient all-reduce: ") +
                       error.message();
        return result;
      }
    }
    // The stop request travels with the loss: each rank sees it at its own
    // moment, and all must leave the loop after the same step, or the ones
    // left behind would wait in the next all-reduce forever.
    const bool stop_here = options.stop_requested && options.stop_requested();
    const bool checkpoint_here = options.checkpoint_requested && options.checkpoint_requested();
    // Partitioned gradients' squares ride along too: their sum over ranks is
    // the squared global norm. So does a checkpoint request, for the same
    // reason as a stop.
    std::array<double, 4> sums = {
        loss_sum / static_cast<double>(accumulation), stop_here ? 1.0 : 0.0,
        partitioned_grads ? backend.sum_of_squares(grads.data(), own_count) : 0.0,
        checkpoint_here ? 1.0 : 0.0};
    if (std::string error = sum_over_ranks(data_comm, sums.data(), 4); !error.empty()) {
      result.error = "loss all-reduce: " + error;
      return result;
    }
    const double loss = sums[0] / dp_size;
    const bool stop_after_step = sums[1] > 0;
    const bool checkpoint_requested = sums[3] > 0;

    const double grad_norm =
        std::sqrt(partitioned_grads ? sums[2]
                                    : partitioned_sum_of_squares(backend, grads.data(), norm_partition));
    if (!std::isfinite(grad_norm) || !std::isfinite(loss)) {
      result.error = fmt::format(
          "step {}: the loss ({}) or gradient norm ({}) is not finite; "
          "lower the learning rate or enable gradient_clipping",
          step + 1, loss, grad_norm);
      return result;
    }
    // DeepSpeed's and PyTorch's clip_grad_norm_: scale by max/(norm + 1e-6)
    // when that is below 1.
    if (training.gradient_clipping > 0) {
      const double factor = training.gradient_clipping / (grad_norm + 1e-6);
      if (factor < 1) {
        backend.scale(grads.data(), static_cast<int64_t>(grads.size()), static_cast<float>(factor));
      }
    }
    const double lr = learning_rate(training.scheduler, training.optimizer.lr, step);
    if (partitioned_grads) {
      optimizer.step_partition(backend, master, grads.data(), lr);
    } else {
      optimizer.step(backend, master, grads.data(), lr);
    }
    // Stage 3 gathers no parameters after the step but the persistent ones.
    if (partitioned_params) {
      if (std::string error = zero3->refresh_persistent(); !error.empty()) {
        result.error = "persistent parameter all-gather: " + error;
        return result;
      }
    } else if (sharded) {
      if (core::Status error = all_gather_partitions(
              data_comm, partition, training.zero.allgather_bucket_size, result.params.data());
          !error.ok()) {
        result.error = "parameter all-gather: " + error.message();
        return result;
      }
    }
    result.steps = step + 1;
    if (step == 0 && options.on_memory) {
      MemoryReport memory;
      memory.parameters = partitioned_params ? zero3->parameter_bytes()
                                             : table.total() * static_cast<int64_t>(sizeof(float));
      memory.gradients = static_cast<int64_t>(grads.size() * sizeof(float));
      memory.optimizer_states = optimizer.state_bytes();
      memory.activations = model.activation_bytes();
      memory.communication_buffers =
          reducer->buffer_bytes() + (partitioned_params ? zero3->buffer_bytes() : 0);
      memory.gradient_workspace_peak = workspace.peak_resident_bytes();
      memory.parameter_workspace_peak = partitioned_params ? zero3->workspace_peak_bytes() : 0;
      options.on_memory(memory);
    }

    StepReport report;
    report.step = step + 1;
    report.loss = loss;
    report.lr = lr;
    report.grad_norm = grad_norm;
    report.step_seconds = seconds_since(start);
    report.tokens_per_second = tokens_per_step / report.step_seconds;
    report.tflops = model.flops_per_token() * report.tokens_per_second / 1e12;
    const bool last_step = step + 1 == training.steps;
    const bool eval_step = last_step || stop_after_step ||
                           (training.eval_interval > 0 && (step + 1) % training.eval_interval == 0);
    if (eval_step) {
      // Under stage 3 blocks are gathered as evaluation reaches them, so
      // every rank runs the same number of forward passes.
      double sum = sum_of_batch_losses(
          model, model_params, data.valid, micro, training.eval_batches, dp_rank, dp_size,
          partitioned_params ? std::function<void()>([&zero3] { zero3->end_forward_only(); })
                             : std::function<void()>());
      if (partitioned_params) {
        if (std::string error = zero3->error(); !error.empty()) {
          result.error = "ZeRO stage 3: " + error;
          return result;
        }
      }
      if (std::string error = sum_over_ranks(data_comm, &sum, 1); !error.empty()) {
        result.error = "evaluation all-reduce: " + error;
        return result;
      }
      report.eval_loss = sum / static_cast<double>(training.eval_batches);
    }
    const int64_t interval = spec.checkpoint.interval;
    if (options.save_checkpoint &&
        (last_step || stop_after_step || checkpoint_requested ||
         (interval > 0 && (step + 1) % interval == 0))) {
      CheckpointSlice slice;
      slice.step = step + 1;
      slice.rank = dp_rank;
      slice.ranks = dp_size;
      slice.total_parameters = table.total();
      slice.begin = norm_partition.begin(dp_rank);
      slice.end = norm_partition.end(dp_rank);
      slice.optimizer_steps = optimizer.steps_taken();
      // Stage 3's master holds this rank's partition, the others hold
      // everything: either way these floats are there. The moments start at
      // the optimizer's first float (own_begin).
      slice.params = master + slice.begin;
      slice.adam_m = optimizer.first_moment() + (slice.begin - own_begin);
      slice.adam_v = optimizer.second_moment() + (slice.begin - own_begin);
      options.save_checkpoint(slice);
    }
    if (options.on_step) options.on_step(report);
    if (stop_after_step && step + 1 < training.steps) {
      result.stopped = true;
      break;
    }
  }
  if (partitioned_params) {
    if (std::string error = zero3->gather_whole(result.params); !error.empty()) {
      result.error = "final parameter all-gather: " + error;
      return result;
    }
  }
  result.params.resize(table.total());  // drop the partitions' padding
  return result;
}

}  // namespace dslaunch::worker::engine
