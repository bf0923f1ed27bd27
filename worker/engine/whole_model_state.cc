// ZeRO stage 0 with an optimizer that sees the whole model and may average
// over the data group itself (WholeModelOptimizer: Lamb and the compressed
// optimizers). Gradients are all-reduced during the last micro-batch's
// backward only at the steps the optimizer asks for; at the others each rank
// keeps its own, the global norm (and clipping) is its own, as in DeepSpeed,
// and only an overflow is agreed on by every rank.
#include "worker/engine/model_state.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include <fmt/format.h>

#include "worker/engine/whole_model_optimizer.h"
#include "worker/parallel/gradient_reducer.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker::engine {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

double sum_of_squares_in(kernels::Backend& backend, const float* grads, int64_t begin, int64_t end,
                         const Ranges& ranges) {
  if (ranges.empty()) return backend.sum_of_squares(grads + begin, end - begin);
  double sum = 0;
  for (const auto& [range_begin, range_end] : ranges) {
    const int64_t from = std::max(range_begin, begin);
    const int64_t to = std::min(range_end, end);
    if (from < to) sum += backend.sum_of_squares(grads + from, to - from);
  }
  return sum;
}

bool same_place(const core::RankState& state, const core::ModelShard& shard) {
  return state.tensor_rank == shard.tensor_rank && state.tensor_ranks == shard.tensor_size &&
         state.stage == shard.stage && state.stages == shard.stages;
}

class WholeModelState final : public ModelState {
 public:
  explicit WholeModelState(ModelStateInputs& inputs)
      : training_(*inputs.training),
        table_(*inputs.table),
        layout_(*inputs.layout),
        comm_(*inputs.data_comm),
        backend_(*inputs.backend),
        partition_(make_zero_partition(table_.total(), comm_.size(), kZeroPartitionAlignment)),
        precision_(inputs.precision),
        norm_ranges_(std::move(inputs.norm_ranges)),
        params_(table_.total(), 0.0f),
        grads_(table_.total(), 0.0f),
        reducer_(comm_, grads_.data(), table_.total(), training_.zero.reduce_bucket_size),
        optimizer_(make_whole_model_optimizer(training_.optimizer, table_, comm_, backend_)) {
    reducer_.set_communication_type(gradient_communication_type(training_, precision_));
    init_status_ = inputs.initial_parameters(0, table_.total(), params_.data());
    if (precision_ == core::DType::kF32) return;
    masters_ = params_;
    backend_.round_to(params_.data(), params_.data(), table_.total(), precision_);
  }

  const core::Status& init_status() const { return init_status_; }

  core::Status resume(const std::vector<core::ShardLocation>& shards, int64_t optimizer_steps,
                      const std::function<void(const std::string&)>& notice) {
    for (const auto& [kind, array] : optimizer_->layout_state()) {
      if (std::string error;
          !core::read_flat_range(shards, layout_, kind, 0, table_.total(), array, error)) {
        return core::Status(core::StatusCode::kDataLoss, error);
      }
    }
    optimizer_->set_steps_taken(optimizer_steps);
    if (core::Status status = resume_rank_state(shards, notice); !status.ok()) return status;
    optimizer_->resumed(master());
    if (masters_.empty()) return {};
    backend_.round_to(params_.data(), masters_.data(), table_.total(), precision_);
    return {};
  }

  const float* parameters_for_model() override { return params_.data(); }
  bool parameters_resident() const override { return true; }
  float* gradients_for_backward() override { return grads_.data(); }
  // Whole, averaged or this rank's own.
  float* reduced_gradients() override { return grads_.data(); }

  void begin_step() override {
    backend_.memset_zero(grads_.data(), static_cast<int64_t>(grads_.size() * sizeof(float)));
    averaged_ = optimizer_->averages_gradients(optimizer_->steps_taken() + 1);
  }
  bool reduces_micro_batch(int64_t index, int64_t count) const override {
    return averaged_ && index + 1 == count;
  }
  void grads_ready(int64_t begin, int64_t end) override {
    round_gradients(begin, end);
    reducer_.ready(begin, end);
  }
  core::Status finish_backward(bool reduced) override {
    if (!reduced) return {};
    return reducer_.finish().with_context("gradient all-reduce");
  }

  // Averaged gradients: every rank computes the same norm, summed partition
  // by partition as ZeRO's stages do. This rank's own: its own norm, and a
  // share that makes every rank see an overflow on any.
  double norm_share() override {
    if (averaged_) return 0;
    round_gradients(0, table_.total());
    local_squares_ = 0;
    for (int r = 0; r < partition_.ranks; ++r) {
      local_squares_ += sum_of_squares_in(backend_, grads_.data(), partition_.begin(r),
                                          partition_.end(r), norm_ranges_);
    }
    return std::isfinite(local_squares_) ? 0.0 : local_squares_;
  }
  double squared_grad_norm(double summed_shares) override {
    if (!averaged_) return std::isfinite(summed_shares) ? local_squares_ : summed_shares;
    double sum = 0;
    for (int r = 0; r < partition_.ranks; ++r) {
      sum += sum_of_squares_in(backend_, grads_.data(), partition_.begin(r), partition_.end(r),
                               norm_ranges_);
    }
    return sum;
  }
  void clip(float factor) override {
    backend_.scale(grads_.data(), static_cast<int64_t>(grads_.size()), factor);
  }
  core::Status optimizer_step(double lr) override {
    if (core::Status status = optimizer_->step(master(), grads_.data(), lr); !status.ok()) {
      return status.with_context("optimizer step");
    }
    if (!masters_.empty()) {
      backend_.round_to(params_.data(), masters_.data(), table_.total(), precision_);
    }
    return {};
  }

  bool compressed_last_step() const override { return optimizer_->compressed_last_step(); }

  std::function<void()> after_forward_only() override { return {}; }
  core::Status forward_only_status() override { return {}; }

  core::StatusOr<CheckpointSlice> checkpoint_slice(int64_t step) override {
    CheckpointSlice slice;
    slice.step = step;
    slice.rank = comm_.rank();
    slice.ranks = comm_.size();
    slice.total_parameters = table_.total();
    slice.begin = partition_.begin(comm_.rank());
    slice.end = partition_.end(comm_.rank());
    slice.optimizer_steps = optimizer_->steps_taken();
    slice.layout = &layout_;
    const float* weights = optimizer_->synchronized_parameters();
    if (weights == nullptr) weights = master();
    slice.arrays.push_back(
        {{core::StateKind::kParameter, core::DType::kF32}, weights + slice.begin});
    for (const auto& [kind, array] : optimizer_->layout_state()) {
      slice.arrays.push_back({{kind, core::DType::kF32}, array + slice.begin});
    }
    core::RankState& state = slice.rank_state.emplace();
    state.data_rank = comm_.rank();
    state.data_ranks = comm_.size();
    state.scalars = optimizer_->scalars();
    for (const OptimizerArray& array : optimizer_->rank_arrays()) {
      state.arrays.push_back({array.name, array.dtype, array.count});
      slice.rank_arrays.push_back(array.data);
    }
    slice.in_place = true;
    return slice;
  }

  MemoryReport memory_report(int64_t activation_bytes) override {
    MemoryReport memory;
    memory.parameters = table_.total() * static_cast<int64_t>(sizeof(float));
    memory.gradients = static_cast<int64_t>(grads_.size() * sizeof(float));
    memory.optimizer_states =
        static_cast<int64_t>(masters_.size() * sizeof(float)) + optimizer_->state_bytes();
    memory.activations = activation_bytes;
    memory.communication_buffers = reducer_.buffer_bytes() + optimizer_->buffer_bytes();
    return memory;
  }

  core::StatusOr<std::vector<float>> final_parameters() override {
    // 0/1 Adam between synchronisations: the weights every rank agrees on.
    if (const float* synchronized = optimizer_->synchronized_parameters()) {
      return std::vector<float>(synchronized, synchronized + table_.total());
    }
    if (!masters_.empty()) return std::move(masters_);
    return std::move(params_);
  }

 private:
  float* master() { return masters_.empty() ? params_.data() : masters_.data(); }
  void round_gradients(int64_t begin, int64_t end) {
    if (!masters_.empty()) {
      backend_.round_to(grads_.data() + begin, grads_.data() + begin, end - begin, precision_);
    }
  }

  // The optimizer's own state from this rank's shard (same place in the
  // same data group), or, in another data group, what every data rank
  // shares from data rank 0's, the error feedback starting again.
  core::Status resume_rank_state(const std::vector<core::ShardLocation>& shards,
                                 const std::function<void(const std::string&)>& notice) {
    const core::ModelShard& place = table_.shard();
    std::optional<std::pair<std::string, core::ShardHeader>> own, first;
    int saved_ranks = 0;
    for (const core::ShardLocation& shard : shards) {
      std::string error;
      std::optional<core::ShardHeader> header = core::read_shard_header(shard.path, error);
      if (!header) return core::Status(core::StatusCode::kDataLoss, error);
      if (!header->rank_state || !same_place(*header->rank_state, place)) continue;
      const core::RankState& state = *header->rank_state;
      if (state.data_ranks == comm_.size() && state.data_rank == comm_.rank()) {
        own.emplace(shard.path, *header);
      }
      if (state.data_rank == 0) {
        saved_ranks = state.data_ranks;
        first.emplace(shard.path, *header);
      }
    }
    const auto& source = own ? own : first;
    optimizer_->set_scalars(source ? source->second.rank_state->scalars
                                   : std::map<std::string, double>());
    for (const OptimizerArray& array : optimizer_->rank_arrays()) {
      if (array.data_rank_own && !own) continue;
      if (!source) {
        return core::Status(
            core::StatusCode::kDataLoss,
            fmt::format("the checkpoint holds no {} state (its {}) for tensor "
                        "rank {} of {}, pipeline stage {} of {}",
                        spec::optimizer_type_name(training_.optimizer.type), array.name,
                        place.tensor_rank, place.tensor_size, place.stage, place.stages));
      }
      if (core::Status status = read_array(source->first, source->second, array); !status.ok()) {
        return status;
      }
    }
    if (own) return {};
    optimizer_->restart_error_feedback();
    const std::vector<OptimizerArray> arrays = optimizer_->rank_arrays();
    const bool has_feedback = std::any_of(arrays.begin(), arrays.end(),
                                          [](const OptimizerArray& a) { return a.data_rank_own; });
    if (!notice || !has_feedback) return {};
    const std::string name = spec::optimizer_type_name(training_.optimizer.type);
    if (!source) {
      notice(fmt::format("the checkpoint holds no {} state: its error feedback starts from zero",
                         name));
    } else if (saved_ranks != comm_.size()) {
      notice(
          fmt::format("resuming {} on {} data-parallel ranks from a checkpoint of {}: the "
                      "error feedback of compressed communication starts again from zero",
                      name, comm_.size(), saved_ranks));
    } else {
      notice(
          fmt::format("the checkpoint holds no {} state of data rank {}: the error feedback "
                      "starts again from zero",
                      name, comm_.rank()));
    }
    return {};
  }

  static core::Status read_array(const std::string& path, const core::ShardHeader& header,
                                 const OptimizerArray& array) {
    for (const core::RankStateArray& saved : header.rank_state->arrays) {
      if (saved.name != array.name) continue;
      if (saved.count != array.count || saved.dtype != array.dtype) {
        return core::Status(core::StatusCode::kDataLoss,
                            fmt::format("{}: its {} holds {} {} elements, this run's {} {}", path,
                                        array.name, saved.count, core::dtype_name(saved.dtype),
                                        array.count, core::dtype_name(array.dtype)));
      }
      std::string error;
      if (!core::read_rank_state_array(path, header, array.name, array.data, error)) {
        return core::Status(core::StatusCode::kDataLoss, error);
      }
      return {};
    }
    return core::Status(core::StatusCode::kDataLoss,
                        fmt::format("{} holds no {} in its rank state", path, array.name));
  }

  const spec::TrainingSpec& training_;
  const core::ParameterTable& table_;
  const std::vector<core::LayoutTensor>& layout_;
  comm::Communicator& comm_;
  kernels::Backend& backend_;
  const ZeroPartition partition_;  // where checkpoints are cut, and the norm's order
  const core::DType precision_;
  const Ranges norm_ranges_;
  core::Status init_status_;    // reading the initial parameters
  std::vector<float> params_;   // what the model reads
  std::vector<float> masters_;  // 16-bit training: the fp32 weights the optimizer updates
  std::vector<float> grads_;
  GradientReducer reducer_;
  std::unique_ptr<WholeModelOptimizer> optimizer_;
  bool averaged_ = true;      // this step's gradients are averaged before the optimizer
  double local_squares_ = 0;  // this rank's own gradients' squared norm
};

}  // namespace

core::StatusOr<std::unique_ptr<ModelState>> make_whole_model_state(ModelStateInputs inputs) {
  const std::vector<core::ShardLocation>* shards = inputs.resume_shards;
  const int64_t optimizer_steps = inputs.resume_optimizer_steps;
  std::function<void(const std::string&)> notice = inputs.notice;
  const spec::OptimizerType type = inputs.training->optimizer.type;
  if (type != spec::OptimizerType::kLamb && !spec::compresses_communication(type)) {
    return core::invalid_argument(fmt::format("optimizer {} is not one of the whole-model ones",
                                              spec::optimizer_type_name(type)));
  }
  auto state = std::make_unique<WholeModelState>(inputs);
  if (!state->init_status().ok()) return state->init_status();
  if (shards != nullptr) {
    if (core::Status status = state->resume(*shards, optimizer_steps, notice); !status.ok()) {
      return status;
    }
  }
  return std::unique_ptr<ModelState>(std::move(state));
}

}  // namespace dslaunch::worker::engine
