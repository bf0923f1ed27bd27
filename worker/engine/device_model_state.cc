// Training on GPUs with the optimizer there, as DeepSpeed trains without
// offload: the parameters, the gradients, the optimizer's masters and
// moments all live in the GPU's memory, and the whole step runs there. With
// several data ranks ZeRO stages 0-3 average the gradients over a
// communicator on the GPU's memory (NCCL's; host staging's on the
// emulator) with the same buckets and arithmetic as over host memory, and
// the optimizer updates this rank's partition (stage 1 on) before the
// partitions are gathered there (stages 1-2), or gathered a region at a
// time around the model's use of it (stage 3, device_zero3_parameters.h). No model state crosses to
// the host between steps; tensor and pipeline groups still pass what they exchange through host
// copies (the model's and StageLinks' staging, and the tied embedding's).
#include <algorithm>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/layout/device_optimizer_bytes.h"
#include "kernels/device_buffer.h"
#include "worker/engine/device_gradient_pages.h"
#include "worker/engine/device_zero3_parameters.h"
#include "worker/engine/model_state.h"
#include "worker/engine/moment_resume.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/squared_norm.h"
#include "worker/engine/streamed_state_arrays.h"
#include "worker/engine/unpinned_notice.h"
#include "worker/parallel/device_gradient_reducer.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker::engine {
namespace {

class DeviceModelState final : public ModelState {
 public:
  explicit DeviceModelState(ModelStateInputs& inputs)
      : table_(*inputs.table),
        layout_(*inputs.layout),
        training_(*inputs.training),
        device_(*inputs.optimizer_device),
        comm_(inputs.device_data_comm),
        total_(table_.total()),
        precision_(inputs.precision),
        ranks_(inputs.data_comm->size()),
        rank_(inputs.data_comm->rank()),
        partitioned_grads_(ranks_ > 1 && training_.zero.stage >= 2),
        stage3_(training_.zero.stage == 3),
        partition_(make_zero_partition(total_, training_.zero.stage >= 1 ? ranks_ : 1,
                                       kZeroPartitionAlignment)),
        checkpoint_partition_(make_zero_partition(total_, ranks_, kZeroPartitionAlignment)),
        owner_(partition_.ranks > 1 ? rank_ : 0),
        own_begin_(partition_.begin(owner_)),
        own_count_(partition_.end(owner_) - own_begin_),
        norm_ranges_(std::move(inputs.norm_ranges)),
        host_optimizer_(inputs.host_optimizer_backend),
        host_share_(
            host_optimizer_ != nullptr
                ? core::host_optimizer_elements(own_count_, training_.zero.offload_optimizer.ratio)
                : 0),
        optimizer_(training_.optimizer, table_, own_begin_, own_begin_ + own_count_) {}

  core::Status init(ModelStateInputs& inputs) {
    if (ranks_ > 1 && comm_ == nullptr) {
      return core::internal_error(
          "several data ranks on the GPU need a communicator over its memory "
          "(ModelStateInputs::device_data_comm)");
    }
    try {
      if (stage3_) {
        zero3_.emplace(comm_, device_, table_, partition_,
                       training_.zero.param_persistence_threshold,
                       training_.zero.prefetch_bucket_size, training_.zero.max_live_parameters);
      } else {
        params_ = kernels::DeviceBuffer<float>(device_, partition_.padded_total());
      }
      if (partitioned_grads_) {
        grad_pages_.emplace(device_, total_);
        partition_grads_ = kernels::DeviceBuffer<float>(device_, own_count_);
      } else {
        grads_ = kernels::DeviceBuffer<float>(device_, total_);
      }
      if (ranks_ > 1) {
        reducer_.emplace(*comm_, device_, total_, training_.zero.reduce_bucket_size,
                         gradient_communication_type(training_, precision_));
      }
      if (partitioned_grads_) {
        reducer_->scatter_into(
            {grad_pages_->data(), partition_grads_.data(),
             [this](int64_t begin, int64_t end) { grad_pages_->consumed(begin, end); }});
        inputs.model->set_gradient_space(&*grad_pages_);
      } else if (reducer_) {
        reducer_->all_reduce_into(grads_.data());
      }
      // In fp32 training the weights are the masters.
      optimizer_.place_on_device(device_, mixed() ? nullptr : weights(),
                                 core::kDeviceOptimizerChunk, host_optimizer_, host_share_,
                                 training_.zero.offload_optimizer.pin_memory);
      notice_unpinned(inputs.notice, optimizer_.unpinned_host_share_bytes());
    } catch (const HostShareNoRoom&) {
      return core::Status(
          core::StatusCode::kResourceExhausted,
          fmt::format(
              "host memory has no room for offload_optimizer.ratio {}'s share of the "
              "optimizer's states ({:.2f} GiB: fp32 masters and moments of {} "
              "parameters); lower zero_optimization.offload_optimizer.ratio, or "
              "spread the ranks over more hosts",
              training_.zero.offload_optimizer.ratio,
              static_cast<double>(core::host_optimizer_bytes(host_share_)) / (int64_t{1} << 30),
              host_share_));
    } catch (const std::bad_alloc&) {
      return core::Status(
          core::StatusCode::kResourceExhausted,
          fmt::format(
              "the GPU has no room for the model states of {} parameters ({:.2f} GiB: "
              "fp32 weights and gradients, the optimizer's masters and moments{}); {} "
              "to keep {} optimizer's states in host memory, {}or split the model over "
              "tensor or pipeline ranks",
              total_, static_cast<double>(state_bytes()) / (int64_t{1} << 30),
              ranks_ > 1 ? " of this rank's partition" : "",
              host_optimizer_ != nullptr
                  ? fmt::format("raise zero_optimization.offload_optimizer.ratio ({})",
                                training_.zero.offload_optimizer.ratio)
                  : std::string("set zero_optimization.offload_optimizer.device cpu"),
              host_optimizer_ != nullptr ? "more of the" : "the",
              ranks_ > 1 && training_.zero.stage == 0 ? "raise zero_optimization.stage, " : ""));
    }
    if (!partitioned_grads_) device_.memset_zero(grads_.data(), grads_.bytes());
    // The partitions' padding.
    if (stage3_) {
      device_.memset_zero(weights() + own_begin_, own_count_ * static_cast<int64_t>(sizeof(float)));
    } else {
      device_.memset_zero(params_.data(), params_.bytes());
    }
    if (partition_grads_.data() != nullptr) {
      device_.memset_zero(partition_grads_.data(), partition_grads_.bytes());
    }
    // The initial parameters through host memory, a piece at a time (stage
    // 3: this rank's partition only); the optimizer's masters of this
    // rank's partition from the same pieces.
    constexpr int64_t kPiece = int64_t{4} << 20;
    const int64_t own_end = own_begin_ + own_count_;
    const int64_t first = stage3_ ? own_begin_ : 0;
    const int64_t last = stage3_ ? std::min(own_end, total_) : total_;
    std::vector<float> piece(std::clamp<int64_t>(last - first, 0, kPiece));
    for (int64_t begin = first; begin < last; begin += kPiece) {
      const int64_t end = std::min(begin + kPiece, last);
      if (core::Status status = inputs.initial_parameters(begin, end, piece.data()); !status.ok()) {
        return status;
      }
      device_.copy_host_to_device(weights() + begin, piece.data(),
                                  (end - begin) * static_cast<int64_t>(sizeof(float)));
      const int64_t from = std::max(begin, own_begin_);
      const int64_t to = std::min(end, own_end);
      // (The host's share of the optimizer keeps masters in fp32 training too.)
      if ((mixed() || host_share_ > 0) && from < to) {
        optimizer_.set_masters(from - own_begin_, to - from, piece.data() + (from - begin));
      }
    }
    // 16-bit training: the model reads the masters' rounding.
    if (mixed()) device_.round_to(weights() + first, weights() + first, last - first, precision_);
    if (stage3_) {
      inputs.model->set_parameter_source(&*zero3_);
      if (core::Status status = zero3_->refresh_persistent(); !status.ok()) return status;
    }
    if (inputs.resume_shards == nullptr) return {};
    return resume_moments(optimizer_, *inputs.resume_shards, layout_, own_begin_, own_count_,
                          inputs.resume_optimizer_steps);
  }

  const float* parameters_for_model() override {
    return stage3_ ? zero3_->workspace() : params_.data();
  }
  bool parameters_resident() const override { return !stage3_; }
  float* gradients_for_backward() override { return gradients(); }
  float* reduced_gradients() override { return partitioned_grads_ ? nullptr : grads_.data(); }

  // Whole gradients start the step at zero; partitioned ones start their
  // partition at zero (backward's pages are zeroed as they are prepared).
  void begin_step() override {
    if (partitioned_grads_) {
      device_.memset_zero(partition_grads_.data(), partition_grads_.bytes());
    } else {
      device_.memset_zero(grads_.data(), grads_.bytes());
    }
  }
  // As ZeRO's host states: stages 0-1 (and one rank) complete the gradients
  // in the last micro-batch's backward, which is when 16-bit training rounds
  // them; stage 2 reduces every micro-batch's.
  bool reduces_micro_batch(int64_t index, int64_t count) const override {
    return partitioned_grads_ || index + 1 == count;
  }
  // Over several ranks gradients are reduced a bucket at a time as
  // backward completes them (DeviceGradientReducer::ready()), overlapping
  // it where the communicator runs on a device stream (NCCL's).
  void grads_ready(int64_t begin, int64_t end) override {
    if (mixed()) {
      device_.round_to(gradients() + begin, gradients() + begin, end - begin, precision_);
    }
    if (reducer_) reducer_->ready(begin, end);
  }
  core::Status finish_backward(bool reduced) override {
    if (core::Status gathered = forward_only_status(); !gathered.ok()) return gathered;
    if (partitioned_grads_) return reducer_->finish();
    if (!reduced || !reducer_) return {};
    return reducer_->finish();
  }

  double norm_share() override {
    if (!partitioned_grads_) return 0;
    return sum_of_squares_in(device_, partition_grads_.data(), own_begin_, own_begin_,
                             own_begin_ + own_count_, norm_ranges_);
  }
  double squared_grad_norm(double summed_shares) override {
    if (partitioned_grads_) return summed_shares;
    return sum_of_squares_by_partition(device_, grads_.data(), checkpoint_partition_, norm_ranges_);
  }
  void clip(float factor) override {
    if (partitioned_grads_) {
      device_.scale(partition_grads_.data(), own_count_, factor);
    } else {
      device_.scale(grads_.data(), total_, factor);
    }
  }
  // The step over this rank's partition, then the partitions gathered
  // (stage 3: only the persistent tensors' now).
  core::Status optimizer_step(double lr) override {
    RoundedCopy rounded;
    if (mixed()) rounded = {weights(), precision_};
    const core::Status stepped =
        partitioned_grads_
            ? optimizer_.step_partition(device_, weights(), partition_grads_.data(), lr, rounded)
            : optimizer_.step(device_, weights(), grads_.data(), lr, rounded);
    if (!stepped.ok()) return stepped;
    if (stage3_) return zero3_->refresh_persistent();
    if (partition_.ranks == 1) return stepped;
    return all_gather_partitions(*comm_, partition_, training_.zero.allgather_bucket_size,
                                 params_.data())
        .with_context("parameter all-gather on the GPU");
  }

  std::function<void()> after_forward_only() override {
    if (!stage3_) return {};
    return [this] { zero3_->end_forward_only(); };
  }
  core::Status forward_only_status() override {
    return stage3_ ? zero3_->status() : core::Status();
  }

  // ZeRO's checkpoint partition of this rank (at stage 0 a slice of the
  // whole optimizer it holds), read from the GPU into the shard a piece at a
  // time.
  core::StatusOr<CheckpointSlice> checkpoint_slice(int64_t step) override {
    CheckpointSlice slice;
    slice.step = step;
    slice.rank = rank_;
    slice.ranks = ranks_;
    slice.total_parameters = total_;
    slice.begin = checkpoint_partition_.begin(rank_);
    slice.end = checkpoint_partition_.end(rank_);
    slice.optimizer_steps = optimizer_.steps_taken();
    slice.layout = &layout_;
    const int64_t first = slice.begin - own_begin_;  // of the optimizer's floats
    slice.arrays = streamed_state_arrays(
        [this, first](int64_t from, int64_t count, float* out) {
          optimizer_.read_masters(first + from, count, out);
          return core::Status();
        },
        optimizer_, first);
    return slice;
  }

  // In the GPU's memory, all of it but the host's share of the optimizer's
  // states (partial offload), which optimizer_states counts too.
  MemoryReport memory_report(int64_t activation_bytes) override {
    MemoryReport memory;
    memory.parameters = stage3_ ? zero3_->partition_bytes() : params_.bytes();
    // The persistent tensors' pages included.
    if (stage3_) memory.parameter_workspace_peak = zero3_->workspace_peak_bytes();
    memory.gradients = grads_.bytes() + partition_grads_.bytes();
    // Backward's buffer at stages 2-3: its most resident, as on the host.
    if (grad_pages_) memory.gradient_workspace_peak = grad_pages_->peak_resident_bytes();
    memory.optimizer_states = optimizer_.state_bytes() + optimizer_.host_state_bytes();
    memory.activations = activation_bytes;
    memory.communication_buffers =
        (reducer_ ? reducer_->buffer_bytes() : 0) + (stage3_ ? zero3_->buffer_bytes() : 0);
    return memory;
  }

  core::StatusOr<std::vector<float>> final_parameters() override {
    std::vector<float> whole(total_);
    if (stage3_) {
      if (core::Status status = zero3_->read_whole(0, total_, whole.data()); !status.ok()) {
        return status;
      }
      return whole;
    }
    device_.copy_device_to_host(whole.data(), params_.data(),
                                total_ * static_cast<int64_t>(sizeof(float)));
    return whole;
  }
  bool streams_final_parameters() const override { return stage3_; }
  core::Status read_final_parameters(int64_t from, int64_t to, float* out) override {
    return zero3_->read_whole(from, to, out);
  }

 private:
  bool mixed() const { return precision_ != core::DType::kF32; }
  // The weights the optimizer writes, addressed from the layout's start
  // (stage 3: only this rank's partition holds memory).
  float* weights() { return stage3_ ? zero3_->master() : params_.data(); }
  // Where backward writes.
  float* gradients() { return grad_pages_ ? grad_pages_->data() : grads_.data(); }
  int64_t state_bytes() const {
    return core::device_state_bytes(
               {.parameters = total_,
                .ranks = ranks_,
                .stage = training_.zero.stage,
                .mixed = mixed(),
                .bucket_elements = training_.zero.reduce_bucket_size,
                .narrow_wire =
                    gradient_communication_type(training_, precision_) != core::DType::kF32,
                .host_optimizer_share =
                    host_optimizer_ != nullptr ? training_.zero.offload_optimizer.ratio : 0.0})
        .total();
  }

  const core::ParameterTable& table_;
  const std::vector<core::LayoutTensor>& layout_;
  const spec::TrainingSpec& training_;
  kernels::Backend& device_;
  comm::Communicator* const comm_;  // over device memory; null with one rank
  const int64_t total_;
  const core::DType precision_;
  const int ranks_;
  const int rank_;
  // ZeRO stages 2-3 over several ranks: backward's gradients are reduced
  // into this rank's partition every micro-batch.
  const bool partitioned_grads_;
  const bool stage3_;
  // The optimizer's: over the ranks from stage 1, whole at stage 0.
  const ZeroPartition partition_;
  const ZeroPartition checkpoint_partition_;
  const int owner_;
  const int64_t own_begin_;
  const int64_t own_count_;
  const std::vector<std::pair<int64_t, int64_t>> norm_ranges_;
  // Partial offload: CPU Adam's backend, and the floats of the partition
  // whose optimizer states it keeps in host memory.
  kernels::Backend* const host_optimizer_;
  const int64_t host_share_;
  AdamW optimizer_;
  kernels::DeviceBuffer<float> params_;           // whole, padded to the partition (stages 0-2)
  std::optional<DeviceZero3Parameters> zero3_;    // stage 3
  kernels::DeviceBuffer<float> grads_;            // backward's, whole (stages 0-1, one rank)
  // Stages 2-3 over several ranks: backward's, a range at a time, and
  // this rank's partition of the means.
  std::optional<DeviceGradientPages> grad_pages_;
  kernels::DeviceBuffer<float> partition_grads_;
  // Several ranks. Declared last: it refers to grad_pages_ and
  // partition_grads_.
  std::optional<DeviceGradientReducer> reducer_;
};

}  // namespace

core::StatusOr<std::unique_ptr<ModelState>> make_device_model_state(ModelStateInputs inputs) {
  auto state = std::make_unique<DeviceModelState>(inputs);
  if (core::Status status = state->init(inputs); !status.ok()) return status;
  return std::unique_ptr<ModelState>(std::move(state));
}

}  // namespace dslaunch::worker::engine
