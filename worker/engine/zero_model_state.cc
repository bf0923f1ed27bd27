// ZeRO's model states over the data group. Stages 0 and 1 keep whole
// gradients on every rank, all-reduced once per step (stage 1 partitions
// the optimizer states and all-gathers the updated parameters); stages 2
// and 3 reduce-scatter every micro-batch's gradients into each rank's
// partition (stage 3 partitions the parameters too, gathering each block
// around its use).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "worker/engine/model_state.h"
#include "worker/engine/moment_resume.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/squared_norm.h"
#include "worker/engine/streamed_state_arrays.h"
#include "worker/engine/zero3_parameters.h"
#include "worker/parallel/gradient_partition.h"
#include "worker/parallel/gradient_reducer.h"
#include "worker/parallel/partition_swap.h"
#include "worker/parallel/releasable_buffer.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker::engine {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;
using engine::sum_of_squares_in;  // in memory; the swapped partition's below

// The same over a swapped gradient partition, read a piece at a time: each
// range's sum is the in-order sum of its blocks of kSumOfSquaresBlock
// floats, as one call over the range in memory adds them, so the norm has
// the same bits whether the gradients were swapped or not.
core::StatusOr<double> sum_of_squares_in(kernels::Backend& backend, GradientPartition& grads,
                                         int64_t begin, int64_t end, const Ranges& ranges) {
  constexpr int64_t kPiece = 64 * kernels::kSumOfSquaresBlock;
  const Ranges all = {{begin, end}};
  double sum = 0;
  for (const auto& [range_begin, range_end] : ranges.empty() ? all : ranges) {
    const int64_t from = std::max(range_begin, begin);
    const int64_t to = std::min(range_end, end);
    double range_sum = 0;
    for (int64_t piece = from; piece < to; piece += kPiece) {
      const int64_t piece_end = std::min(piece + kPiece, to);
      core::StatusOr<const float*> read = grads.read(piece, piece_end);
      if (!read.ok()) return read.status();
      for (int64_t block = piece; block < piece_end; block += kernels::kSumOfSquaresBlock) {
        const int64_t count = std::min(kernels::kSumOfSquaresBlock, piece_end - block);
        range_sum += backend.sum_of_squares(*read + (block - piece), count);
      }
    }
    if (from < to) sum += range_sum;
  }
  return sum;
}

// What every stage shares: the partition of the layout, the optimizer over
// this rank's part of it, and the checkpoint's cut.
class ZeroStateBase : public ModelState {
 public:
  // whole_parameters: every rank keeps the whole parameters (all stages but
  // 3, whose ranks read only their partition from inputs.initial_parameters).
  // swap_masters: in 16-bit training with offload_optimizer nvme, the fp32
  // masters go to a swap file with the moments (partitioned gradients only,
  // whose optimizer step streams a group at a time).
  ZeroStateBase(ModelStateInputs& inputs, bool whole_parameters, bool swap_masters)
      : training_(*inputs.training),
        table_(*inputs.table),
        layout_(*inputs.layout),
        comm_(*inputs.data_comm),
        backend_(*inputs.backend),
        sharded_(training_.zero.stage >= 1 && comm_.size() > 1),
        partition_(make_zero_partition(table_.total(), sharded_ ? comm_.size() : 1,
                                       kZeroPartitionAlignment)),
        // Checkpoints are cut along the partition ZeRO would use, and whole
        // gradients' norm is summed over it: the same at every stage.
        checkpoint_partition_(
            make_zero_partition(table_.total(), comm_.size(), kZeroPartitionAlignment)),
        owner_(sharded_ ? comm_.rank() : 0),
        own_begin_(partition_.begin(owner_)),
        own_count_(partition_.end(owner_) - own_begin_),
        optimizer_(training_.optimizer, table_, own_begin_, partition_.end(owner_)),
        norm_ranges_(std::move(inputs.norm_ranges)),
        precision_(inputs.precision),
        initial_parameters_(std::move(inputs.initial_parameters)) {
    if (whole_parameters) {
      params_.resize(partition_.padded_total(), 0.0f);
      init_status_ = initial_parameters_(0, table_.total(), params_.data());
      initial_parameters_ = nullptr;  // may hold init_from's weights
      if (!init_status_.ok()) return;
    }
    if (precision_ == core::DType::kF32) return;
    // 16-bit training: the optimizer updates fp32 masters of this rank's
    // partition (a mapping of the whole layout, of which only the
    // partition's pages are touched); the model reads their rounding.
    masters_ = std::make_unique<ReleasableBuffer>(partition_.padded_total());
    if (masters_->data() == nullptr) return;
    const int64_t own_end = own_begin_ + own_count_;
    if (swap_masters) {
      core::StatusOr<std::unique_ptr<PartitionSwap>> swap = PartitionSwap::create(
          training_.zero.offload_optimizer.nvme_path, own_begin_, own_end, swap_io());
      if (!swap.ok()) {
        init_status_ = swap.status().with_context(
            "zero_optimization.offload_optimizer.nvme_path (the fp32 masters' swap file)");
        return;
      }
      master_swap_ = std::move(*swap);
    }
    // The partition's masters a piece at a time: swapped, each piece goes to
    // the file and out of memory at once.
    constexpr int64_t kPieceFloats = int64_t{2} << 20;
    for (int64_t begin = own_begin_; begin < own_end; begin += kPieceFloats) {
      const int64_t end = std::min(begin + kPieceFloats, own_end);
      float* masters = masters_->data() + begin;
      if (whole_parameters) {
        backend_.copy_device_to_device(masters, params_.data() + begin,
                                       (end - begin) * static_cast<int64_t>(sizeof(float)));
      } else if (init_status_ = initial_parameters_(begin, end, masters); !init_status_.ok()) {
        return;
      }
      if (master_swap_) {
        init_status_ = master_swap_->store(begin, end, masters).with_context(
            "writing the fp32 masters to their swap file");
        if (!init_status_.ok()) return;
        masters_->zero(begin, end);
      }
    }
    if (whole_parameters) {
      backend_.round_to(params_.data(), params_.data(), table_.total(), precision_);
    }
  }

  core::Status init_status() const {
    if (!init_status_.ok()) return init_status_;
    if (masters_ && !masters_->status().ok()) {
      return masters_->status().with_context("the fp32 master weights");
    }
    return {};
  }

  // ZeRO-Infinity's offload_optimizer nvme: the moments go to a swap file.
  core::Status swap_moments() {
    const spec::ZeroSpec& zero = training_.zero;
    MomentSwap swap;
    swap.folder = zero.offload_optimizer.nvme_path;
    swap.group_elements = zero.sub_group_size;
    swap.buffer_count = zero.offload_optimizer.buffer_count;
    swap.io = swap_io();
    return optimizer_.swap_moments(swap).with_context(
        "zero_optimization.offload_optimizer.nvme_path");
  }

  // Reads the optimizer's moments of this rank's partition from a
  // checkpoint.
  core::Status resume(const std::vector<core::ShardLocation>& shards, int64_t optimizer_steps) {
    return resume_moments(optimizer_, shards, layout_, own_begin_, own_count_, optimizer_steps);
  }

  core::StatusOr<CheckpointSlice> checkpoint_slice(int64_t step) override {
    CheckpointSlice slice;
    slice.step = step;
    slice.rank = comm_.rank();
    slice.ranks = comm_.size();
    slice.total_parameters = table_.total();
    slice.begin = checkpoint_partition_.begin(comm_.rank());
    slice.end = checkpoint_partition_.end(comm_.rank());
    slice.optimizer_steps = optimizer_.steps_taken();
    slice.layout = &layout_;
    if (optimizer_.swapped() || parameters_swapped()) {
      // State on NVMe streams from its swap files into the shard, which is
      // then written at once: a copy would bring it all back into memory.
      const int64_t begin = slice.begin;
      slice.arrays = streamed_state_arrays(
          [this, begin](int64_t from, int64_t count, float* out) {
            return read_parameters(begin + from, begin + from + count, out);
          },
          optimizer_, slice.begin - own_begin_);
      return slice;
    }
    if (core::Status status = prepare_checkpoint(); !status.ok()) return status;
    core::StatusOr<AdamW::Moments> moments = optimizer_.moments();
    if (!moments.ok()) return moments.status().with_context("reading the optimizer's moments");
    // Stage 3's master holds this rank's partition, the others hold
    // everything: either way these elements are there. The moments start at
    // the optimizer's first element (own_begin_).
    slice.arrays = {
        {{core::StateKind::kParameter, core::DType::kF32}, master() + slice.begin},
        {{core::StateKind::kAdamM, core::DType::kF32}, moments->first + (slice.begin - own_begin_)},
        {{core::StateKind::kAdamV, core::DType::kF32},
         moments->second + (slice.begin - own_begin_)}};
    slice.in_place = true;
    return slice;
  }

 protected:
  // How every swap file of this state reaches the drive (the spec's aio).
  core::SwapFile::Io swap_io() const {
    return {.block_size = training_.aio.block_size,
            .queue_depth = training_.aio.queue_depth,
            .single_submit = training_.aio.single_submit};
  }
  // Makes master() readable for a checkpoint (until the next begin_step()).
  virtual core::Status prepare_checkpoint() { return {}; }
  // Whether the fp32 weights checkpoints keep are in a swap file, and
  // floats [from, to) of them (of the layout) into out.
  virtual bool parameters_swapped() const { return master_swap_ != nullptr; }
  virtual core::Status read_parameters(int64_t from, int64_t to, float* out) {
    if (master_swap_) return master_swap_->load(from, to, out).with_context("the fp32 masters");
    std::copy(master() + from, master() + to, out);
    return {};
  }
  // The weights the model reads (of which this rank's partition is what the
  // others gather), addressed from the layout's start.
  virtual float* model_weights() = 0;
  // The fp32 weights the optimizer updates (and checkpoints keep): the
  // model's own in fp32 training, the masters in 16-bit training.
  float* master() { return masters_ ? masters_->data() : model_weights(); }
  bool mixed() const { return precision_ != core::DType::kF32; }

  // 16-bit training: each rank's gradients are rounded to the 16-bit format
  // before they are reduced (in fp32), as DeepSpeed's model holds them in
  // it; an fp16 gradient past 65504 becomes inf, which the loss scaler sees.
  void round_gradients(float* grads, int64_t begin, int64_t end) {
    if (mixed()) backend_.round_to(grads + begin, grads + begin, end - begin, precision_);
  }
  // 16-bit training: the optimizer's step writes the model's partition as
  // the masters' rounding in the same pass, ready to be gathered.
  RoundedCopy rounded_copy() {
    if (!mixed()) return {};
    return {model_weights(), precision_};
  }
  int64_t master_bytes() const {
    return masters_ && !master_swap_ ? own_count_ * static_cast<int64_t>(sizeof(float)) : 0;
  }

  const spec::TrainingSpec& training_;
  const core::ParameterTable& table_;
  const std::vector<core::LayoutTensor>& layout_;
  comm::Communicator& comm_;
  kernels::Backend& backend_;
  const bool sharded_;
  const ZeroPartition partition_;
  const ZeroPartition checkpoint_partition_;
  const int owner_;
  const int64_t own_begin_;
  const int64_t own_count_;
  AdamW optimizer_;
  const Ranges norm_ranges_;
  const core::DType precision_;
  // Until the state is set up (stage 3 reads its partition after the base).
  std::function<core::Status(int64_t, int64_t, float*)> initial_parameters_;
  core::Status init_status_;
  std::vector<float> params_;  // whole (padded to the partition), or empty under stage 3
  std::unique_ptr<ReleasableBuffer> masters_;  // 16-bit training only
  // Where the masters live when swapped: masters_ then holds only the
  // groups the optimizer's step has brought in.
  std::unique_ptr<PartitionSwap> master_swap_;
};

// Stages 0 and 1: whole gradients on every rank, all-reduced in buckets
// during the last micro-batch's backward.
class ReplicatedGradients final : public ZeroStateBase {
 public:
  explicit ReplicatedGradients(ModelStateInputs& inputs)
      : ZeroStateBase(inputs, /*whole_parameters=*/true, /*swap_masters=*/false),
        grads_(table_.total(), 0.0f),
        reducer_(comm_, grads_.data(), table_.total(), training_.zero.reduce_bucket_size) {
    reducer_.set_communication_type(gradient_communication_type(training_, precision_));
  }

  const float* parameters_for_model() override { return params_.data(); }
  bool parameters_resident() const override { return true; }
  float* gradients_for_backward() override { return grads_.data(); }
  float* reduced_gradients() override { return grads_.data(); }
  void begin_step() override {
    backend_.memset_zero(grads_.data(), static_cast<int64_t>(grads_.size() * sizeof(float)));
  }
  // Only the last micro-batch's backward completes the gradients.
  bool reduces_micro_batch(int64_t index, int64_t count) const override {
    return index + 1 == count;
  }
  void grads_ready(int64_t begin, int64_t end) override {
    round_gradients(grads_.data(), begin, end);
    reducer_.ready(begin, end);
  }
  core::Status finish_backward(bool reduced) override {
    if (!reduced) return {};
    return reducer_.finish().with_context("gradient all-reduce");
  }

  double norm_share() override { return 0; }
  double squared_grad_norm(double) override {
    return sum_of_squares_by_partition(backend_, grads_.data(), checkpoint_partition_,
                                       norm_ranges_);
  }
  void clip(float factor) override {
    backend_.scale(grads_.data(), static_cast<int64_t>(grads_.size()), factor);
  }
  core::Status optimizer_step(double lr) override {
    if (core::Status status =
            optimizer_.step(backend_, master(), grads_.data(), lr, rounded_copy());
        !status.ok()) {
      return status;
    }
    if (!sharded_) return {};
    return all_gather_partitions(comm_, partition_, training_.zero.allgather_bucket_size,
                                 params_.data())
        .with_context("parameter all-gather");
  }

  std::function<void()> after_forward_only() override { return {}; }
  core::Status forward_only_status() override { return {}; }

  MemoryReport memory_report(int64_t activation_bytes) override {
    MemoryReport memory;
    memory.parameters = table_.total() * static_cast<int64_t>(sizeof(float));
    memory.gradients = static_cast<int64_t>(grads_.size() * sizeof(float));
    memory.optimizer_states = optimizer_.state_bytes() + master_bytes();
    memory.activations = activation_bytes;
    memory.communication_buffers = reducer_.buffer_bytes();
    return memory;
  }

  core::StatusOr<std::vector<float>> final_parameters() override {
    std::vector<float> whole = std::move(params_);
    whole.resize(table_.total());  // drop the partitions' padding
    return whole;
  }

 private:
  float* model_weights() override { return params_.data(); }

  std::vector<float> grads_;
  GradientReducer reducer_;
};

// Stages 2 and 3: backward accumulates into a workspace whose buckets are
// reduce-scattered, as they complete, into this rank's partition of the
// gradients; the workspace gives their pages back as it goes. Stage 3 keeps
// only its partition of the parameters too: the model reads them from a
// workspace in which Zero3Parameters gathers each block around its use.
class PartitionedGradients final : public ZeroStateBase, public model::OutputGradientSink {
 public:
  explicit PartitionedGradients(ModelStateInputs& inputs)
      : ZeroStateBase(inputs, /*whole_parameters=*/inputs.training->zero.stage < 3,
                      /*swap_masters=*/inputs.training->zero.offload_optimizer.device ==
                          spec::OffloadDevice::kNvme),
        grads_(gradient_partition()),
        workspace_(table_.total()),
        reducer_(comm_, workspace_, training_.zero.reduce_bucket_size, partition_,
                 [this](int64_t begin, int64_t end, const GradientReducer::AddToShare& add) {
                   return grads_->add(begin, end, add);
                 }) {
    reducer_.set_communication_type(gradient_communication_type(training_, precision_));
    reducer_.set_quantized(training_.zero.quantized_gradients);
  }

  // Stage 3's gathered parameters, set up after construction (it may fail).
  core::Status partition_parameters(model::Gpt2Model& model) {
    if (!workspace_.status().ok()) return workspace_.status();
    if (training_.zero.stage < 3) return {};
    Zero3Settings settings;
    settings.persistence_threshold = training_.zero.param_persistence_threshold;
    settings.prefetch_bucket_size = training_.zero.prefetch_bucket_size;
    settings.max_live_parameters = training_.zero.max_live_parameters;
    settings.quantized_weights = training_.zero.quantized_weights;
    settings.hpz_partition_size = training_.zero.hpz_partition_size;
    // ZeRO-Infinity's parameter offload: the partition goes to a swap file.
    std::unique_ptr<PartitionSwap> swap;
    const spec::OffloadSpec& offload = training_.zero.offload_param;
    if (offload.device == spec::OffloadDevice::kNvme) {
      core::StatusOr<std::unique_ptr<PartitionSwap>> made =
          PartitionSwap::create(offload.nvme_path, own_begin_, own_begin_ + own_count_, swap_io());
      if (!made.ok()) {
        return made.status().with_context("zero_optimization.offload_param.nvme_path");
      }
      swap = std::move(*made);
    }
    // The model's weights start as the initial parameters, in 16-bit
    // training rounded.
    core::Status read;
    const auto initial = [this, &read](int64_t begin, int64_t end, float* out) {
      if (read.ok()) read = initial_parameters_(begin, end, out);
      if (read.ok() && masters_) backend_.round_to(out, out, end - begin, precision_);
      return read;
    };
    zero3_.emplace(comm_, table_, partition_, settings, initial, std::move(swap));
    if (!read.ok()) return read;
    if (std::string error = zero3_->error(); !error.empty()) {
      return core::internal_error("ZeRO stage 3: " + error);
    }
    model.set_parameter_source(&*zero3_);
    // The output layer's part of the token embedding's gradient is reduced
    // a vocabulary chunk at a time, as it completes.
    model.set_output_gradient_sink(this);
    const core::TensorInfo& wte = table_.tensor(core::TensorRole::kWte);
    tied_ = {wte.offset, wte.offset + wte.numel};
    initial_parameters_ = nullptr;
    return {};
  }

  const float* parameters_for_model() override {
    return zero3_ ? zero3_->workspace() : params_.data();
  }
  bool parameters_resident() const override { return !zero3_; }
  // Needs no clearing: the reducer leaves it zero.
  float* gradients_for_backward() override { return workspace_.data(); }
  float* reduced_gradients() override { return nullptr; }
  void begin_step() override {
    grads_->begin_sum();
    // What a checkpoint read of offloaded parameters leaves the memory.
    if (zero3_) pending_ = zero3_->store_partition(/*changed=*/false);
  }
  bool reduces_micro_batch(int64_t, int64_t) const override { return true; }
  // In 16-bit training the token embedding's gradient is rounded once its
  // two parts are added, in the partition (see finish_backward()).
  void output_part_ready(int64_t begin, int64_t end) override { reducer_.ready_part(begin, end); }
  void wait_output_parts() override { reducer_.wait_parts(); }
  void grads_ready(int64_t begin, int64_t end) override {
    round_gradients(workspace_.data(), begin, std::min(end, std::max(begin, tied_.first)));
    round_gradients(workspace_.data(), std::max(begin, std::min(end, tied_.second)), end);
    reducer_.ready(begin, end);
  }
  core::Status finish_backward(bool) override {
    if (!pending_.ok()) return pending_;
    if (core::Status gathered = forward_only_status(); !gathered.ok()) return gathered;
    if (core::Status status = reducer_.finish(); !status.ok()) {
      return status.with_context("gradient reduce-scatter");
    }
    grads_->end_sum();
    return {};
  }

  double norm_share() override {
    if (core::Status rounded = round_tied_gradient(); !rounded.ok()) {
      norm_status_ = rounded;
      return std::numeric_limits<double>::quiet_NaN();
    }
    if (!grads_->swapped()) {
      return sum_of_squares_in(backend_, grads_->data(), own_begin_, own_begin_,
                               own_begin_ + own_count_, norm_ranges_);
    }
    core::StatusOr<double> sum =
        sum_of_squares_in(backend_, *grads_, own_begin_, own_begin_ + own_count_, norm_ranges_);
    norm_status_ = sum.status();
    return sum.ok() ? *sum : std::numeric_limits<double>::quiet_NaN();
  }
  core::Status norm_status() const override { return norm_status_; }
  double squared_grad_norm(double summed_shares) override { return summed_shares; }
  void clip(float factor) override { grads_->scale(factor); }
  core::Status optimizer_step(double lr) override {
    if (grads_->swapped()) {
      if (core::Status status = streamed_step(lr); !status.ok()) return status;
    } else {
      // Offloaded parameters come in whole for the step; in 16-bit training
      // the masters, in memory, overwrite them instead.
      if (zero3_) {
        if (core::Status status = zero3_->load_partition(/*read=*/!masters_); !status.ok()) {
          return status;
        }
      }
      if (core::Status status =
              optimizer_.step_partition(backend_, master(), grads_->data(), lr, rounded_copy());
          !status.ok()) {
        return status;
      }
    }
    // Stage 3 gathers no parameters after the step but the persistent ones.
    if (zero3_) {
      if (std::string error = zero3_->refresh_persistent(); !error.empty()) {
        return core::Status(core::StatusCode::kUnavailable,
                            "persistent parameter all-gather: " + error);
      }
      return zero3_->store_partition(/*changed=*/true);
    }
    return all_gather_partitions(comm_, partition_, training_.zero.allgather_bucket_size,
                                 params_.data())
        .with_context("parameter all-gather");
  }

  // Under stage 3 blocks are gathered as a forward-only pass reaches them.
  std::function<void()> after_forward_only() override {
    if (!zero3_) return {};
    return [this] { zero3_->end_forward_only(); };
  }
  core::Status forward_only_status() override {
    if (!zero3_) return {};
    if (std::string error = zero3_->error(); !error.empty()) {
      return core::Status(core::StatusCode::kUnavailable, "ZeRO stage 3: " + error);
    }
    return {};
  }

  MemoryReport memory_report(int64_t activation_bytes) override {
    MemoryReport memory;
    memory.parameters =
        zero3_ ? zero3_->parameter_bytes() : table_.total() * static_cast<int64_t>(sizeof(float));
    memory.gradients = grads_->memory_bytes();
    memory.optimizer_states = optimizer_.state_bytes() + master_bytes();
    memory.activations = activation_bytes;
    memory.communication_buffers = reducer_.buffer_bytes() + (zero3_ ? zero3_->buffer_bytes() : 0);
    memory.gradient_workspace_peak = workspace_.peak_resident_bytes();
    memory.parameter_workspace_peak = zero3_ ? zero3_->workspace_peak_bytes() : 0;
    return memory;
  }

  core::StatusOr<std::vector<float>> final_parameters() override {
    std::vector<float> whole;
    if (zero3_) {
      if (std::string error = zero3_->gather_whole(whole); !error.empty()) {
        return core::Status(core::StatusCode::kUnavailable, "final parameter all-gather: " + error);
      }
    } else {
      whole = std::move(params_);
    }
    whole.resize(table_.total());  // drop the partitions' padding
    return whole;
  }

 private:
  float* model_weights() override { return zero3_ ? zero3_->master() : params_.data(); }
  core::Status prepare_checkpoint() override {
    if (zero3_ && !masters_) return zero3_->load_partition();
    return {};
  }
  bool parameters_swapped() const override {
    return ZeroStateBase::parameters_swapped() || (zero3_ && zero3_->swapped() && !masters_);
  }
  core::Status read_parameters(int64_t from, int64_t to, float* out) override {
    if (zero3_ && zero3_->swapped() && !masters_) return zero3_->read_range(from, to, out);
    return ZeroStateBase::read_parameters(from, to, out);
  }
  bool streams_final_parameters() const override { return zero3_.has_value(); }
  // Over several ranks, collective: each rank reads its floats of [from,
  // to), from memory or its swap file, and all gather them; a rank that
  // cannot read sends zeros, and every rank learns of it.
  core::Status read_final_parameters(int64_t from, int64_t to, float* out) override {
    constexpr const char* kWhat = "the final parameters";
    if (comm_.size() == 1) return zero3_->read_range(from, to, out).with_context(kWhat);
    comm::Blocks blocks;
    int64_t displacement = 0;
    for (int r = 0; r < comm_.size(); ++r) {
      const int64_t count = std::max<int64_t>(
          0, std::min(to, partition_.end(r)) - std::max(from, partition_.begin(r)));
      blocks.counts.push_back(count);
      blocks.displacements.push_back(displacement);
      displacement += count;
    }
    const int me = comm_.rank();
    float* own = out + blocks.displacements[me];
    core::Status read;
    if (blocks.counts[me] > 0) {
      const int64_t own_from = std::max(from, partition_.begin(me));
      read = zero3_->read_range(own_from, own_from + blocks.counts[me], own).with_context(kWhat);
      if (!read.ok()) std::fill(own, own + blocks.counts[me], 0.0f);
    }
    // Both collectives run whatever fails, so every rank makes the same.
    const core::Status gathered = comm_.all_gather(comm::buffer_of(own, blocks.counts[me]),
                                                   comm::buffer_of(out, to - from), blocks)
                                      ->wait()
                                      .with_context(kWhat);
    float failed = read.ok() && gathered.ok() ? 0.0f : 1.0f;
    const core::Status agreed =
        comm_.all_reduce(comm::buffer_of(&failed, 1), comm::ReduceOp::kMax)->wait().with_context(kWhat);
    if (!gathered.ok()) return gathered;
    if (!agreed.ok()) return agreed;
    if (!read.ok()) return read;
    if (failed > 0.0f) {
      return core::Status(core::StatusCode::kUnavailable,
                          "another rank could not read its part of the final parameters (its "
                          "log says why)");
    }
    return {};
  }

  // ZeRO-Infinity's offload_optimizer nvme swaps the gradients out with the
  // moments. Null only when that failed (init_status() says why).
  std::unique_ptr<GradientPartition> gradient_partition() {
    const int64_t own_end = own_begin_ + own_count_;
    const spec::OffloadSpec& offload = training_.zero.offload_optimizer;
    if (offload.device != spec::OffloadDevice::kNvme) {
      return std::make_unique<GradientPartition>(backend_, own_begin_, own_end);
    }
    core::StatusOr<std::unique_ptr<PartitionSwap>> swap =
        PartitionSwap::create(offload.nvme_path, own_begin_, own_end, swap_io());
    if (!swap.ok()) {
      init_status_ = swap.status().with_context(
          "zero_optimization.offload_optimizer.nvme_path (the gradients' swap file)");
      return nullptr;
    }
    return std::make_unique<GradientPartition>(backend_, std::move(*swap), own_begin_);
  }

  // The optimizer's step a swap group at a time, with the group's gradients
  // read from their swap file and, when the parameters are swapped too,
  // their floats brought in only for the group's update (16-bit training
  // brings in the group's masters from their swap file, updates them and
  // writes them and the 16-bit weights' rounding back).
  core::Status streamed_step(double lr) {
    AdamW::GroupIo io;
    io.load = [this](int64_t from, int64_t to) -> core::StatusOr<const float*> {
      if (master_swap_) {
        if (core::Status status = master_swap_->load(from, to, masters_->data() + from);
            !status.ok()) {
          return status.with_context("reading the fp32 masters");
        }
      }
      if (zero3_) {
        if (core::Status status = zero3_->load_range(from, to, /*read=*/!masters_); !status.ok()) {
          return status;
        }
      }
      return grads_->read(from, to);
    };
    io.store = [this](int64_t from, int64_t to) -> core::Status {
      if (master_swap_) {
        if (core::Status status = master_swap_->store(from, to, masters_->data() + from);
            !status.ok()) {
          return status.with_context("writing the fp32 masters");
        }
        masters_->zero(from, to);
      }
      return zero3_ ? zero3_->store_range(from, to) : core::Status();
    };
    core::Status stepped = optimizer_.step_streamed(backend_, master(), lr, io, rounded_copy());
    grads_->release_buffer();
    return stepped;
  }

  // 16-bit training: the token embedding's gradient, reduced in two parts
  // (the tied output layer's early, the encoder's with the buckets), is
  // rounded in the partition once the step's micro-batches are all in, so
  // that on one rank it is the rounding of the same sum, added in the same
  // order, that a whole-gradient rank rounds.
  core::Status round_tied_gradient() {
    const int64_t begin = std::max(tied_.first, own_begin_);
    const int64_t end = std::min(tied_.second, own_begin_ + own_count_);
    if (!mixed() || begin >= end) return {};
    return grads_
        ->add(begin, end,
              [&](float* own, int64_t, int64_t count) {
                backend_.round_to(own, own, count, precision_);
              })
        .with_context("rounding the token embedding's gradient");
  }

  std::unique_ptr<GradientPartition> grads_;  // this rank's partition
  // The token embedding's floats when the model reports its gradient in two
  // parts (stage 3); empty otherwise.
  std::pair<int64_t, int64_t> tied_{0, 0};
  ReleasableBuffer workspace_;
  GradientReducer reducer_;
  std::optional<Zero3Parameters> zero3_;
  core::Status pending_;  // a failed write-back of offloaded parameters
  core::Status norm_status_;
};

}  // namespace

core::StatusOr<std::unique_ptr<ModelState>> make_zero_model_state(ModelStateInputs inputs) {
  const spec::ZeroSpec& zero = inputs.training->zero;
  // A GPU with its optimizer there keeps everything there.
  if (inputs.optimizer_device != nullptr) {
    return make_device_model_state(std::move(inputs));
  }
  // One rank needs no partitions, unless its parameters go to NVMe (a
  // partition of the whole: ZeRO-Infinity on a single device).
  const bool partitioned_grads =
      zero.stage >= 2 &&
      (inputs.data_comm->size() > 1 || zero.offload_param.device == spec::OffloadDevice::kNvme);
  std::unique_ptr<ZeroStateBase> state;
  if (partitioned_grads) {
    auto partitioned = std::make_unique<PartitionedGradients>(inputs);
    if (core::Status status = partitioned->init_status(); !status.ok()) return status;
    if (core::Status status = partitioned->partition_parameters(*inputs.model); !status.ok()) {
      return status;
    }
    state = std::move(partitioned);
  } else {
    state = std::make_unique<ReplicatedGradients>(inputs);
    if (core::Status status = state->init_status(); !status.ok()) return status;
  }
  if (inputs.training->zero.offload_optimizer.device == spec::OffloadDevice::kNvme) {
    if (core::Status status = state->swap_moments(); !status.ok()) return status;
  }
  if (inputs.resume_shards != nullptr) {
    if (core::Status status = state->resume(*inputs.resume_shards, inputs.resume_optimizer_steps);
        !status.ok()) {
      return status;
    }
  }
  return std::unique_ptr<ModelState>(std::move(state));
}

}  // namespace dslaunch::worker::engine
