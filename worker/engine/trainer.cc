#include "worker/engine/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/layout/pipeline_schedule.h"
#include "core/spec/elasticity.h"
#include "core/spec/training_support.h"
#include "core/weights/initial_weights.h"
#include "kernels/pinned_host_memory.h"
#include "worker/comm/host_staged_communicator.h"
#include "worker/data/blended_sampler.h"
#include "worker/data/consecutive_batch.h"
#include "worker/data/window_sampler.h"
#include "worker/engine/device_mirror.h"
#include "worker/engine/evaluation.h"
#include "worker/engine/gathered_mirror.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/lr_schedule.h"
#include "worker/engine/model_parallel.h"
#include "worker/engine/model_state.h"
#include "worker/engine/stage_links.h"
#include "worker/engine/unpinned_notice.h"
#include "worker/model/gpt2_model.h"

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

std::string data_problem(const spec::JobSpec& spec, const data::TrainingData& data, int64_t micro) {
  std::vector<const data::TokenRange*> ranges;
  for (const data::TokenRange& range : data.train) ranges.push_back(&range);
  ranges.push_back(&data.valid);
  for (const data::TokenRange* range : ranges) {
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

// Sets the backend's matrix products to the training's precision for the
// run, and back to fp32 after it (the backend outlives the run).
class MatmulPrecision {
 public:
  MatmulPrecision(kernels::Backend& backend, core::DType dtype) : backend_(backend) {
    backend_.set_matmul_precision(dtype);
  }
  ~MatmulPrecision() { backend_.set_matmul_precision(core::DType::kF32); }
  MatmulPrecision(const MatmulPrecision&) = delete;
  MatmulPrecision& operator=(const MatmulPrecision&) = delete;

 private:
  kernels::Backend& backend_;
};

// Counts a communicator the caller made (NCCL's) with the transport's while
// it lives: heartbeats' progress, hang reports' peers and comm_bytes see its
// collectives.
class AttachedCommunicator {
 public:
  AttachedCommunicator(comm::Transport* transport, const comm::Communicator* communicator)
      : transport_(transport), communicator_(communicator) {
    if (transport_ != nullptr && communicator_ != nullptr) transport_->attach(communicator_);
  }
  ~AttachedCommunicator() {
    if (transport_ != nullptr && communicator_ != nullptr) transport_->detach(communicator_);
  }
  AttachedCommunicator(const AttachedCommunicator&) = delete;
  AttachedCommunicator& operator=(const AttachedCommunicator&) = delete;

 private:
  comm::Transport* const transport_;
  const comm::Communicator* const communicator_;
};

// Lets whatever reads an in-place checkpoint slice finish before train()
// returns and the model state it points into goes.
class UpdateFence {
 public:
  explicit UpdateFence(const std::function<void()>& before_update)
      : before_update_(before_update) {}
  ~UpdateFence() {
    if (before_update_) before_update_();
  }
  UpdateFence(const UpdateFence&) = delete;
  UpdateFence& operator=(const UpdateFence&) = delete;

 private:
  const std::function<void()>& before_update_;
};

// Tells the backend where the model's weights are for the run, when they
// stay whole and resident (ZeRO stages 0-2), so that 16-bit products may
// keep a copy of them; forgets them after it.
class ResidentWeights {
 public:
  ResidentWeights(kernels::Backend& backend, bool resident, const float* weights, int64_t n)
      : backend_(backend) {
    if (resident) backend_.set_weights(weights, n);
  }
  ~ResidentWeights() { backend_.set_weights(nullptr, 0); }
  ResidentWeights(const ResidentWeights&) = delete;
  ResidentWeights& operator=(const ResidentWeights&) = delete;

 private:
  kernels::Backend& backend_;
};

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
        batch.train_batch_size !=
            batch.micro_batch_per_gpu * batch.gradient_accumulation_steps * dp_size) {
      result.error = fmt::format(
          "the plan's batch sizes (train_batch_size {}, micro-batch {}, accumulation {}) do "
          "not fit a data group of {} ranks",
          batch.train_batch_size, batch.micro_batch_per_gpu, batch.gradient_accumulation_steps,
          dp_size);
      return result;
    }
  } else {
    const int model_parallel = spec.parallelism.tensor * spec.parallelism.pipeline;
    const spec::BatchResolution resolved =
        spec::training_batch_sizes(training, dp_size * model_parallel, model_parallel);
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

  const auto failed = [&result](const core::Status& status) {
    result.error = status.message();
    return result;
  };
  const auto several = [](comm::Communicator* comm) {
    return comm != nullptr && comm->size() > 1 ? comm : nullptr;
  };
  comm::Communicator* tensor_comm = several(options.tensor_comm);
  comm::Communicator* pipeline_comm = several(options.pipeline_comm);
  // A backend whose memory is not the host's (a GPU) keeps every model
  // state in its memory without offload_optimizer; with it, the states stay
  // in host memory with the host backend's math, and the model computes on
  // a mirror of them. Partial offload (device cpu, ratio below 1) keeps them
  // on the GPU but for the host's share of the optimizer's states, which the
  // host backend's CPU Adam updates.
  const bool on_device = !backend.memory_is_host();
  const bool partial_offload = on_device && spec::partial_optimizer_offload(training.zero);
  const bool mirrored = on_device &&
                        training.zero.offload_optimizer.device != spec::OffloadDevice::kNone &&
                        !partial_offload;
  if (on_device) {
    if (std::string problem = spec::device_training_problem(spec); !problem.empty()) {
      result.error = problem;
      return result;
    }
  }
  if ((mirrored || partial_offload) &&
      (options.host_backend == nullptr || !options.host_backend->memory_is_host())) {
    result.error = fmt::format(
        "training on {} with offload_optimizer needs a host backend for the model states "
        "(TrainerOptions::host_backend)",
        backend.name());
    return result;
  }
  kernels::Backend& state_backend = mirrored ? *options.host_backend : backend;
  const int tensor_size = tensor_comm != nullptr ? tensor_comm->size() : 1;
  const int stages = pipeline_comm != nullptr ? pipeline_comm->size() : 1;
  const core::Gpt2Config config = core::model_config(spec.model, tensor_size);
  core::StatusOr<core::ModelShard> sliced =
      model_shard(spec.parallelism, config, tensor_comm, pipeline_comm, accumulation);
  if (!sliced.ok()) return failed(sliced.status());
  const core::ModelShard& shard = *sliced;
  const core::ParameterTable table(config, shard);
  const std::vector<core::LayoutTensor> layout = core::layout_of(table);
  // The model's size whatever the layout: as one rank holds it, its
  // vocabulary padded for one tensor rank (what checkpoints record).
  const int64_t model_parameters = core::ParameterTable(core::model_config(spec.model, 1)).total();
  const int64_t first_step = options.resume ? options.resume->step : 0;
  const int64_t first_sample = options.resume ? options.resume->samples_seen : 0;
  const auto samples_before = [&](int64_t step) {
    return first_sample + (step - first_step) * global_batch;
  };
  const auto resume_failed = [&](const std::string& error) {
    result.error = fmt::format("resuming from the checkpoint of step {}: {}", first_step, error);
    return result;
  };
  const core::DType precision = training_precision(training);
  const MatmulPrecision matmul_precision(backend, precision);
  LossScaler scaler(training.fp16, training.zero.stage);
  int64_t optimizer_steps = first_step;
  if (options.resume) {
    // The optimizer's step count and the loss scaler, from any shard's header
    // (every rank writes the same).
    if (options.resume->shards.empty()) return resume_failed("the checkpoint names no shards");
    std::string error;
    const std::optional<core::ShardHeader> header =
        core::read_shard_header(options.resume->shards.front().path, error);
    if (!header) return resume_failed(error);
    optimizer_steps = header->optimizer_step;
    if (header->loss_scaler && scaler.skips_overflow()) scaler.restore(*header->loss_scaler);
  }
  if (options.resume) {
    if (options.resume->total_parameters != model_parameters) {
      result.error = fmt::format(
          "the checkpoint of step {} holds a model of {} parameters, this spec's has {}",
          options.resume->step, options.resume->total_parameters, model_parameters);
      return result;
    }
  }
  const int chunks = table.chunk_count();
  const std::vector<core::ScheduledPass> schedule =
      chunks > 1   ? core::interleaved_schedule(accumulation, stages, shard.stage, chunks)
      : stages > 1 ? core::one_f_one_b_schedule(accumulation, stages, shard.stage)
                   : core::accumulation_schedule(accumulation);
  // The step's gradients are complete after its last backward pass: with
  // several chunks, each reports its part in its own last one.
  size_t last_backward = 0;
  for (size_t i = 0; i < schedule.size(); ++i) {
    if (schedule[i].kind == core::PassKind::kBackward) last_backward = i;
  }
  const spec::ActivationCheckpointingSpec& checkpointing = training.activation_checkpointing;
  model::ActivationRecompute recompute;
  if (checkpointing.enabled) {
    recompute.blocks = static_cast<int>(std::min<int64_t>(
        checkpointing.number_checkpoints.value_or(config.num_layers), config.num_layers));
    recompute.partition_activations = checkpointing.partition_activations;
  }
  std::vector<std::unique_ptr<model::Gpt2Model>> owned_models;
  std::vector<model::Gpt2Model*> models;
  for (int c = 0; c < chunks; ++c) {
    // One pass runs at a time: the chunks share their scratch.
    owned_models.push_back(std::make_unique<model::Gpt2Model>(
        table, backend, micro, T, tensor_comm, core::schedule_slots(schedule, c), recompute, c,
        c == 0 ? nullptr : models.front()->scratch()));
    models.push_back(owned_models.back().get());
  }
  model::Gpt2Model& model = *models.front();
  const auto tensor_status = [&models]() -> core::Status {
    for (const model::Gpt2Model* chunk : models) {
      if (!chunk->tensor_status().ok()) return chunk->tensor_status();
    }
    return {};
  };
  const auto tensor_comm_seconds = [&models] {
    double seconds = 0;
    for (const model::Gpt2Model* chunk : models) seconds += chunk->tensor_comm_seconds();
    return seconds;
  };
  const auto activation_bytes = [&models] {
    int64_t bytes = 0;
    for (const model::Gpt2Model* chunk : models) bytes += chunk->activation_bytes();
    return bytes;
  };
  StageLinks links(pipeline_comm, models, micro * T * spec.model.hidden_size, backend);
  TiedEmbeddingBuffers tied_embedding;
  ModelStateInputs state_inputs;
  state_inputs.training = &training;
  state_inputs.table = &table;
  state_inputs.layout = &layout;
  state_inputs.data_comm = &data_comm;
  state_inputs.backend = &state_backend;
  state_inputs.model = &model;
  // The model state reads the parameters it keeps a range at a time: from
  // the checkpoint, init_from's weights (loaded whole: a fine-tuning start)
  // or the initialisation.
  if (options.resume) {
    state_inputs.initial_parameters = [&](int64_t begin, int64_t end, float* out) -> core::Status {
      std::string error;
      if (!core::read_flat_range(options.resume->shards, layout, core::StateKind::kParameter, begin,
                                 end, out, error)) {
        return core::Status(core::StatusCode::kDataLoss, error);
      }
      return {};
    };
  } else if (!training.init_from.empty()) {
    auto weights = std::make_shared<std::vector<float>>(table.total());
    if (core::Status status =
            core::load_initial_weights(training.init_from, table, weights->data());
        !status.ok()) {
      return failed(status);
    }
    state_inputs.initial_parameters = [weights](int64_t begin, int64_t end,
                                                float* out) -> core::Status {
      std::copy(weights->begin() + begin, weights->begin() + end, out);
      return {};
    };
  } else {
    auto initializer = std::make_shared<model::Gpt2Initializer>(table, spec.model.init_seed);
    state_inputs.initial_parameters = [initializer](int64_t begin, int64_t end,
                                                    float* out) -> core::Status {
      initializer->fill(begin, end, out);
      return {};
    };
  }
  state_inputs.precision = precision;
  // Without offload_optimizer, a GPU holds every model state.
  if (on_device && !mirrored) {
    state_inputs.optimizer_device = &backend;
    if (partial_offload) state_inputs.host_optimizer_backend = options.host_backend;
  }
  state_inputs.norm_ranges = norm_ranges(table);
  if (options.resume) {
    state_inputs.resume_shards = &options.resume->shards;
    state_inputs.resume_optimizer_steps = optimizer_steps;
  }
  state_inputs.notice = options.on_notice;
  // Several data ranks with the optimizer on the GPU average their gradients
  // there, over a communicator on its memory. It outlives the state.
  std::unique_ptr<comm::Communicator> device_data_comm;
  if (state_inputs.optimizer_device != nullptr && dp_size > 1) {
    core::StatusOr<std::unique_ptr<comm::Communicator>> made_comm =
        options.device_communicator ? options.device_communicator(data_comm)
                                    : comm::make_host_staged_communicator(data_comm, backend);
    if (!made_comm.ok()) {
      return failed(made_comm.status().with_context("the data group's communicator on the GPU"));
    }
    device_data_comm = std::move(*made_comm);
    state_inputs.device_data_comm = device_data_comm.get();
  }
  // Host staging counts through data_comm already.
  const AttachedCommunicator attached(
      options.transport, options.device_communicator ? device_data_comm.get() : nullptr);
  core::StatusOr<std::unique_ptr<ModelState>> made =
      training.optimizer.type == spec::OptimizerType::kLamb ||
              spec::compresses_communication(training.optimizer.type)
          ? make_whole_model_state(std::move(state_inputs))
          : make_zero_model_state(std::move(state_inputs));
  if (!made.ok()) {
    if (options.resume && made.status().code() == core::StatusCode::kDataLoss) {
      return resume_failed(made.status().message());
    }
    result.error = made.status().message();
    return result;
  }
  ModelState& state = **made;
  // Host memory of the state's, pinned for the mirror's copies: released
  // before the state frees it.
  std::vector<kernels::PinnedHostMemory> pins;
  std::optional<DeviceMirror> mirror;
  // ZeRO stage 3's host state gathers the parameters around their use (it
  // never holds them whole): the GPU mirrors each region it gathers.
  std::optional<GatheredMirror> gathered;
  if (mirrored) {
    const bool whole = state.parameters_resident();
    // A state that reduces every micro-batch takes each range of the
    // gradients as backward finishes it: the GPU need not keep them all.
    const bool sparse_gradients = state.reduces_micro_batch(0, 2);
    try {
      mirror.emplace(backend, table.total(), whole, sparse_gradients);
      for (model::Gpt2Model* chunk : models) chunk->set_gradient_space(mirror->gradient_space());
      if (!whole) {  // stage 3, which runs no pipeline: one model
        gathered.emplace(backend, table, training.zero.param_persistence_threshold,
                         *model.parameter_source(), *model.output_gradient_sink(),
                         state.parameters_for_model(), *mirror, state.gradients_for_backward());
        model.set_parameter_source(&*gathered);
        model.set_output_gradient_sink(&*gathered);
      }
    } catch (const std::bad_alloc&) {
      return failed(core::Status(
          core::StatusCode::kResourceExhausted,
          fmt::format("{} has no room for the model's fp32 {}gradients ({} parameters, {:.2f} "
                      "GiB); split the model over more tensor or pipeline ranks",
                      backend.name(), whole ? "parameters and " : "", table.total(),
                      static_cast<double>(table.total()) * (whole ? 8 : 4) / (int64_t{1} << 30))));
    }
    // offload_optimizer.pin_memory: the host arrays the mirror copies from
    // and into, page-locked: the parameters where the state holds them
    // whole (stages 1-2), the gradients where it keeps them whole (stage
    // 1; stage 2's workspace gives its pages back as it reduces them,
    // which locked pages cannot).
    if (training.zero.offload_optimizer.pin_memory && whole) {
      const int64_t bytes = table.total() * static_cast<int64_t>(sizeof(float));
      pins.emplace_back(backend, state.parameters_for_model(), bytes);
      if (!sparse_gradients) pins.emplace_back(backend, state.gradients_for_backward(), bytes);
      int64_t unpinned = 0;
      for (const kernels::PinnedHostMemory& pin : pins) unpinned += bytes - pin.bytes();
      notice_unpinned(options.on_notice, unpinned);
    }
    if (whole) {
      mirror->upload_parameters(state.parameters_for_model());
    } else {
      gathered->upload_persistent();
    }
  }
  // What the model reads and where its backward accumulates.
  const auto model_weights = [&]() -> const float* {
    if (gathered) return gathered->workspace();
    return mirror ? mirror->parameters() : state.parameters_for_model();
  };
  float* const model_gradients = mirror ? mirror->gradients() : state.gradients_for_backward();
  const ResidentWeights resident_weights(backend, state.parameters_resident(), model_weights(),
                                         table.total());
  const UpdateFence update_fence(options.before_update);
  data::BlendedSamplerResult sampling =
      data::BlendedSampler::create(data.train, data.weights, T, training.seed);
  if (!sampling.sampler) {
    result.error = "training data: " + sampling.error;
    return result;
  }
  const data::BlendedSampler& sampler = *sampling.sampler;

  std::vector<int32_t> inputs(micro * T);
  std::vector<int32_t> targets(micro * T);
  const double tokens_per_step = static_cast<double>(global_batch) * T;
  result.steps = first_step;
  const auto wire_bytes = [&options](std::string_view axis) -> int64_t {
    return options.transport != nullptr ? options.transport->wire_bytes(axis) : 0;
  };
  for (int64_t step = first_step; step < training.steps; ++step) {
    if (options.on_step_started) options.on_step_started(step + 1);
    const Clock::time_point start = Clock::now();
    const int64_t wire_before = wire_bytes("");
    const int64_t data_wire_before = wire_bytes("data");
    const double tensor_comm_before = tensor_comm_seconds();
    const double pipeline_wait_before = links.receive_seconds();
    state.begin_step();
    // The injected overflow: this rank's first backward pass of the step
    // scales its gradients by NaN, and the reduction spreads them.
    bool poison = options.poison_gradients && options.poison_gradients(step + 1);
    double loss_sum = 0;
    StepReport report;
    for (size_t i = 0; i < schedule.size(); ++i) {
      const Clock::time_point pass_start = Clock::now();
      const core::ScheduledPass& pass = schedule[i];
      const int64_t m = pass.micro_batch;
      model::Gpt2Model& chunk = *models[pass.chunk];
      if (pass.kind == core::PassKind::kForward) {
        for (int64_t b = 0; b < micro; ++b) {
          const int64_t g =
              data::global_sample_index({samples_before(step), m, dp_size, dp_rank, micro, b});
          sampler.sample(g, inputs.data() + b * T, targets.data() + b * T);
        }
        links.before_forward(pass.chunk, pass.slot);
        if (!links.status().ok()) return failed(links.status());
        loss_sum += chunk.forward(model_weights(), inputs.data(), targets.data(), micro, pass.slot);
        if (!chunk.tensor_status().ok()) return failed(chunk.tensor_status());
        links.after_forward(pass.chunk, pass.slot);
        report.forward_seconds += seconds_since(pass_start);
        continue;
      }
      const bool reduce = state.reduces_micro_batch(m, accumulation);
      links.before_backward(pass.chunk);
      if (!links.status().ok()) return failed(links.status());
      const float scale =
          std::exchange(poison, false)
              ? std::numeric_limits<float>::quiet_NaN()
              : static_cast<float>(scaler.scale() / static_cast<double>(accumulation));
      chunk.backward(
          model_weights(), model_gradients, scale,
          reduce ? model::Gpt2Model::GradientsReady([&state, &mirror](int64_t begin, int64_t end) {
            if (mirror) {
              mirror->take_gradients(begin, end, state.gradients_for_backward());
            }
            state.grads_ready(begin, end);
          })
                 : model::Gpt2Model::GradientsReady(),
          pass.slot);
      links.after_backward(pass.chunk);
      const Clock::time_point backward_end = Clock::now();
      report.backward_seconds += std::chrono::duration<double>(backward_end - pass_start).count();
      const bool complete = chunks == 1 || i == last_backward;
      if (core::Status status = state.finish_backward(reduce && complete); !status.ok()) {
        return failed(status);
      }
      report.gradient_wait_seconds += seconds_since(backward_end);
      if (!chunk.tensor_status().ok()) return failed(chunk.tensor_status());
    }
    links.finish();
    if (!links.status().ok()) return failed(links.status());
    const Clock::time_point passes_end = Clock::now();
    if (stages > 1 && (table.has_embeddings() || table.has_head())) {
      float* reduced = state.reduced_gradients();
      if (reduced == nullptr) {
        return failed(
            core::Status(core::StatusCode::kInternal,
                         "pipeline parallelism needs whole gradients (ZeRO stage 0 or 1)"));
      }
      if (core::Status status = sum_tied_embedding_gradients(*pipeline_comm, table, state_backend,
                                                             reduced, tied_embedding);
          !status.ok()) {
        return failed(status);
      }
    }
    // The stop request travels with the loss: each rank sees it at its own
    // moment, and all must leave the loop after the same step, or the ones
    // left behind would wait in the next all-reduce forever. So do the
    // gradient norm's shares, and a checkpoint request, for the same reason
    // as a stop. Across the tensor group, where every rank has the same loss,
    // the flags and the norm's parts are summed once more.
    // So does a failure of the norm's share (a swapped partition's read), so
    // that every rank stops instead of taking the NaN it leaves for an
    // overflow.
    const bool stop_here = options.stop_requested && options.stop_requested();
    const bool checkpoint_here = options.checkpoint_requested && options.checkpoint_requested();
    const double norm_share = state.norm_share();
    const bool norm_failed = !state.norm_status().ok();
    std::array<double, 5> sums = {loss_sum / static_cast<double>(accumulation),
                                  stop_here ? 1.0 : 0.0, norm_share, checkpoint_here ? 1.0 : 0.0,
                                  norm_failed ? 1.0 : 0.0};
    if (std::string error = sum_over_ranks(data_comm, sums.data(), 5); !error.empty()) {
      result.error = "loss all-reduce: " + error;
      return result;
    }
    // Across the pipeline group, where the last stage alone has the loss and
    // each stage its own part of the norm, all of them are summed.
    std::array<double, 4> tensor_sums = {sums[1], state.squared_grad_norm(sums[2]), sums[3],
                                         sums[4]};
    if (tensor_comm != nullptr) {
      if (std::string error = sum_over_ranks(*tensor_comm, tensor_sums.data(), 4); !error.empty()) {
        result.error = "tensor-group all-reduce of the gradient norm: " + error;
        return result;
      }
    }
    std::array<double, 5> model_sums = {sums[0], tensor_sums[0], tensor_sums[1], tensor_sums[2],
                                        tensor_sums[3]};
    if (pipeline_comm != nullptr) {
      if (std::string error = sum_over_ranks(*pipeline_comm, model_sums.data(), 5);
          !error.empty()) {
        result.error = "pipeline-group all-reduce of the loss: " + error;
        return result;
      }
    }
    if (model_sums[4] > 0) {
      if (norm_failed) return failed(state.norm_status());
      result.error = fmt::format(
          "step {}: another rank could not read its gradients for the norm (its log says why)",
          step + 1);
      return result;
    }
    const double loss = model_sums[0] / dp_size;
    const bool stop_after_step = model_sums[1] > 0;
    const bool checkpoint_requested = model_sums[3] > 0;
    // The norm of the scaled gradients (fp16), and the true one.
    const double loss_scale = scaler.scale();
    const double grad_norm = std::sqrt(model_sums[2]) / loss_scale;
    // fp16: overflowing gradients skip the step on every rank (all saw the
    // same norm) and the scaler adapts.
    const bool skipped =
        scaler.skips_overflow() && std::isfinite(loss) && !std::isfinite(grad_norm);
    const double lr = learning_rate(training.scheduler, training.optimizer.lr,
                                    step - scaler.state().skipped_steps);
    if (std::string error = scaler.update(skipped); !error.empty()) {
      result.error = error;
      return result;
    }
    if (!skipped && (!std::isfinite(grad_norm) || !std::isfinite(loss))) {
      result.error = fmt::format(
          "step {}: the {} is not finite (loss {}, gradient norm {}); lower the learning rate "
          "or enable gradient_clipping",
          step + 1, std::isfinite(loss) ? "gradient norm" : "loss", loss, grad_norm);
      return result;
    }
    if (!skipped) {
      // Unscaling (fp16) and DeepSpeed's and PyTorch's clip_grad_norm_
      // (scale by max/(norm + 1e-6) when that is below 1) in one pass.
      double factor = 1.0 / loss_scale;
      if (training.gradient_clipping > 0) {
        factor *= std::min(1.0, training.gradient_clipping / (grad_norm + 1e-6));
      }
      if (factor != 1.0) state.clip(static_cast<float>(factor));
      if (options.before_update) options.before_update();
      backend.weights_changed();
      if (core::Status status = state.optimizer_step(lr); !status.ok()) {
        result.error = status.message();
        return result;
      }
      if (gathered) {
        gathered->upload_persistent();
      } else if (mirror) {
        mirror->upload_parameters(state.parameters_for_model());
      }
    }
    report.optimizer_seconds = seconds_since(passes_end);
    result.steps = step + 1;
    if (step == first_step && options.on_memory) {
      MemoryReport memory = state.memory_report(activation_bytes());
      memory.weight_copy = backend.weight_copy_bytes();
      if (on_device) memory.device_peak = backend.peak_allocated_bytes();
      options.on_memory(memory);
    }

    report.step = step + 1;
    report.samples = samples_before(step + 1);
    report.loss = loss;
    report.lr = lr;
    report.grad_norm = skipped ? -1 : grad_norm;
    if (training.fp16.enabled) {
      report.loss_scale = loss_scale;
      report.skipped = skipped;
      report.skipped_steps = scaler.state().skipped_steps;
    }
    report.step_seconds = seconds_since(start);
    report.tensor_comm_seconds = tensor_comm_seconds() - tensor_comm_before;
    report.pipeline_wait_seconds = links.receive_seconds() - pipeline_wait_before;
    if (pipeline_comm != nullptr) {
      report.stage_wait_seconds.resize(stages);
      core::Status gathered =
          pipeline_comm
              ->all_gather(comm::buffer_of(&report.pipeline_wait_seconds, 1),
                           comm::buffer_of(report.stage_wait_seconds.data(), stages),
                           comm::Blocks::consecutive(std::vector<int64_t>(stages, 1)))
              ->wait();
      if (!gathered.ok()) return failed(gathered.with_context("gathering the stages' wait times"));
    }
    report.tokens_per_second = tokens_per_step / report.step_seconds;
    report.tflops = model.flops_per_token() * report.tokens_per_second / 1e12;
    const bool last_step = step + 1 == training.steps;
    const bool eval_step = last_step || stop_after_step ||
                           (training.eval_interval > 0 && (step + 1) % training.eval_interval == 0);
    if (eval_step) {
      // After each forward-only pass, the GPU's mirror of what it leaves
      // gathered goes with the host state's.
      std::function<void()> after_forward_only = state.after_forward_only();
      if (gathered) {
        after_forward_only = [&gathered, host = std::move(after_forward_only)] {
          gathered->end_forward_only();
          if (host) host();
        };
      }
      double sum =
          sum_of_batch_losses(models, model_weights(), data.valid, micro, training.eval_batches,
                              dp_rank, dp_size, after_forward_only, &links);
      if (!links.status().ok()) return failed(links.status());
      if (core::Status status = state.forward_only_status(); !status.ok()) {
        result.error = status.message();
        return result;
      }
      if (core::Status status = tensor_status(); !status.ok()) return failed(status);
      if (std::string error = sum_over_ranks(data_comm, &sum, 1); !error.empty()) {
        result.error = "evaluation all-reduce: " + error;
        return result;
      }
      if (pipeline_comm != nullptr) {
        if (std::string error = sum_over_ranks(*pipeline_comm, &sum, 1); !error.empty()) {
          result.error = "evaluation all-reduce over the pipeline: " + error;
          return result;
        }
      }
      report.eval_loss = sum / static_cast<double>(training.eval_batches);
    }
    const int64_t interval = spec.checkpoint.interval;
    if (options.save_checkpoint && (last_step || stop_after_step || checkpoint_requested ||
                                    (interval > 0 && (step + 1) % interval == 0))) {
      core::StatusOr<CheckpointSlice> saved = state.checkpoint_slice(step + 1);
      if (!saved.ok()) return failed(saved.status().with_context("saving a checkpoint"));
      CheckpointSlice& slice = *saved;
      slice.tensor_rank = shard.tensor_rank;
      slice.stage = shard.stage;
      if (slice.rank_state) {
        slice.rank_state->tensor_rank = shard.tensor_rank;
        slice.rank_state->tensor_ranks = shard.tensor_size;
        slice.rank_state->stage = shard.stage;
        slice.rank_state->stages = shard.stages;
      }
      slice.model_parameters = model_parameters;
      if (training.fp16.enabled) slice.loss_scaler = scaler.state();
      options.save_checkpoint(slice);
    }
    report.comm_bytes = wire_bytes("") - wire_before;
    report.data_comm_bytes = wire_bytes("data") - data_wire_before;
    if (!skipped && state.compressed_last_step() && report.data_comm_bytes > 0) {
      const int64_t full = comm::wire_bytes(
          comm::OpKind::kAllReduce, table.total() * static_cast<int64_t>(sizeof(float)), dp_size);
      report.compression_ratio = static_cast<double>(full) / report.data_comm_bytes;
    }
    if (options.on_step) options.on_step(report);
    if (stop_after_step && step + 1 < training.steps) {
      result.stopped = true;
      break;
    }
  }
  // final_parameters() below may take the buffers the last checkpoint
  // points into.
  if (options.before_update) options.before_update();
  const bool streamed = options.write_final_weights && result.steps > 0 && tensor_comm == nullptr &&
                        pipeline_comm == nullptr && state.streams_final_parameters();
  if (streamed) {
    const core::Status written =
        options.write_final_weights([&state](int64_t begin, int64_t end, float* out) {
          return state.read_final_parameters(begin, end, out).message();
        });
    if (!written.ok()) result.error = written.message();
    return result;
  }
  // final_parameters() may hand over (and the gathering below free) the
  // memory pinned.
  pins.clear();
  core::StatusOr<std::vector<float>> final_params = state.final_parameters();
  if (!final_params.ok()) {
    result.error = final_params.status().message();
    return result;
  }
  if (tensor_comm != nullptr || pipeline_comm != nullptr) {
    final_params = gather_whole_model(tensor_comm, pipeline_comm, table, std::move(*final_params),
                                      core::ParameterTable(core::model_config(spec.model, 1)));
    if (!final_params.ok()) {
      result.error = final_params.status().message();
      return result;
    }
  }
  result.params = std::move(*final_params);
  if (options.write_final_weights && result.steps > 0) {
    const core::Status written =
        options.write_final_weights([&result](int64_t begin, int64_t end, float* out) {
          std::copy(result.params.begin() + begin, result.params.begin() + end, out);
          return std::string();
        });
    if (!written.ok()) result.error = written.message();
  }
  return result;
}

}  // namespace dslaunch::worker::engine
