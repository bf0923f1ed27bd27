// One data rank training on a GPU with its optimizer there: the parameters,
// the gradients, the optimizer's masters and moments all live in the GPU's
// memory, and the whole step runs there, as DeepSpeed trains on one GPU.
// With one data rank ZeRO has nothing to partition and nothing to reduce at
// any stage below 3, so no model state needs to cross to the host between
// steps; tensor and pipeline groups still pass what they exchange through
// host copies (the model's and StageLinks' staging, and the tied
// embedding's).
#include <algorithm>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/layout/device_optimizer_bytes.h"
#include "kernels/device_buffer.h"
#include "worker/engine/model_state.h"
#include "worker/engine/moment_resume.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/squared_norm.h"

namespace dslaunch::worker::engine {
namespace {

class DeviceModelState final : public ModelState {
 public:
  explicit DeviceModelState(ModelStateInputs& inputs)
      : table_(*inputs.table),
        layout_(*inputs.layout),
        device_(*inputs.optimizer_device),
        total_(table_.total()),
        precision_(inputs.precision),
        norm_ranges_(std::move(inputs.norm_ranges)),
        optimizer_(inputs.training->optimizer, table_, 0, total_) {}

  core::Status init(ModelStateInputs& inputs) {
    try {
      params_ = kernels::DeviceBuffer<float>(device_, total_);
      grads_ = kernels::DeviceBuffer<float>(device_, total_);
      // In fp32 training the weights are the masters.
      optimizer_.place_on_device(device_, precision_, AdamW::StepMemory::kDevice,
                                 mixed() ? nullptr : params_.data());
    } catch (const std::bad_alloc&) {
      return core::Status(
          core::StatusCode::kResourceExhausted,
          fmt::format("the GPU has no room for the model states of {} parameters ({:.2f} GiB: "
                      "fp32 weights and gradients, the optimizer's masters and moments); set "
                      "zero_optimization.offload_optimizer.device cpu to keep the optimizer's "
                      "states in host memory, or split the model over tensor or pipeline ranks",
                      total_, static_cast<double>(state_bytes()) / (int64_t{1} << 30)));
    }
    device_.memset_zero(grads_.data(), grads_.bytes());
    // The initial parameters through host memory, a piece at a time.
    constexpr int64_t kPiece = int64_t{4} << 20;
    std::vector<float> piece(std::min(total_, kPiece));
    for (int64_t begin = 0; begin < total_; begin += kPiece) {
      const int64_t end = std::min(begin + kPiece, total_);
      if (core::Status status = inputs.initial_parameters(begin, end, piece.data()); !status.ok()) {
        return status;
      }
      device_.copy_host_to_device(params_.data() + begin, piece.data(),
                                  (end - begin) * static_cast<int64_t>(sizeof(float)));
      if (mixed()) optimizer_.set_masters(begin, end - begin, piece.data());
    }
    // 16-bit training: the model reads the masters' rounding.
    if (mixed()) device_.round_to(params_.data(), params_.data(), total_, precision_);
    if (inputs.resume_shards == nullptr) return {};
    return resume_moments(optimizer_, *inputs.resume_shards, layout_, 0, total_,
                          inputs.resume_optimizer_steps);
  }

  bool in_backend_memory() const override { return true; }
  const float* parameters_for_model() override { return params_.data(); }
  bool parameters_resident() const override { return true; }
  float* gradients_for_backward() override { return grads_.data(); }
  float* reduced_gradients() override { return grads_.data(); }

  void begin_step() override { device_.memset_zero(grads_.data(), grads_.bytes()); }
  // The last micro-batch's backward completes the gradients, as at ZeRO
  // stages 0-1, which is when 16-bit training rounds them.
  bool reduces_micro_batch(int64_t index, int64_t count) const override {
    return index + 1 == count;
  }
  void grads_ready(int64_t begin, int64_t end) override {
    if (mixed()) {
      device_.round_to(grads_.data() + begin, grads_.data() + begin, end - begin, precision_);
    }
  }
  core::Status finish_backward(bool) override { return {}; }

  double norm_share() override { return 0; }
  double squared_grad_norm(double) override {
    return sum_of_squares_in(device_, grads_.data(), 0, 0, total_, norm_ranges_);
  }
  void clip(float factor) override { device_.scale(grads_.data(), total_, factor); }
  core::Status optimizer_step(double lr) override {
    RoundedCopy rounded;
    if (mixed()) rounded = {params_.data(), precision_};
    return optimizer_.step(device_, params_.data(), grads_.data(), lr, rounded);
  }

  std::function<void()> after_forward_only() override { return {}; }
  core::Status forward_only_status() override { return {}; }

  // Read from the GPU into the shard a piece at a time.
  core::StatusOr<CheckpointSlice> checkpoint_slice(int64_t step) override {
    CheckpointSlice slice;
    slice.step = step;
    slice.total_parameters = total_;
    slice.begin = 0;
    slice.end = total_;
    slice.optimizer_steps = optimizer_.steps_taken();
    slice.layout = &layout_;
    using core::ShardArrayData;
    slice.arrays = {ShardArrayData::streamed({core::StateKind::kParameter, core::DType::kF32},
                                             [this](int64_t from, int64_t count, void* out) {
                                               optimizer_.read_masters(from, count,
                                                                       static_cast<float*>(out));
                                               return std::string();
                                             }),
                    ShardArrayData::streamed({core::StateKind::kAdamM, core::DType::kF32},
                                             [this](int64_t from, int64_t count, void* out) {
                                               return read_moment(false, from, count, out);
                                             }),
                    ShardArrayData::streamed({core::StateKind::kAdamV, core::DType::kF32},
                                             [this](int64_t from, int64_t count, void* out) {
                                               return read_moment(true, from, count, out);
                                             })};
    return slice;
  }

  // In the GPU's memory, all of it.
  MemoryReport memory_report(int64_t activation_bytes) override {
    MemoryReport memory;
    memory.parameters = params_.bytes();
    memory.gradients = grads_.bytes();
    memory.optimizer_states = optimizer_.state_bytes();
    memory.activations = activation_bytes;
    return memory;
  }

  core::StatusOr<std::vector<float>> final_parameters() override {
    std::vector<float> whole(total_);
    device_.copy_device_to_host(whole.data(), params_.data(), params_.bytes());
    return whole;
  }

 private:
  bool mixed() const { return precision_ != core::DType::kF32; }
  int64_t state_bytes() const {
    return 2 * total_ * 4 + core::device_optimizer_bytes(total_, mixed(), /*staged=*/false);
  }
  std::string read_moment(bool second, int64_t from, int64_t count, void* out) {
    const core::Status status =
        optimizer_.read_moment(second, from, count, static_cast<float*>(out));
    return status.ok() ? std::string() : status.message();
  }

  const core::ParameterTable& table_;
  const std::vector<core::LayoutTensor>& layout_;
  kernels::Backend& device_;
  const int64_t total_;
  const core::DType precision_;
  const std::vector<std::pair<int64_t, int64_t>> norm_ranges_;
  AdamW optimizer_;
  kernels::DeviceBuffer<float> params_;
  kernels::DeviceBuffer<float> grads_;
};

}  // namespace

core::StatusOr<std::unique_ptr<ModelState>> make_device_model_state(ModelStateInputs inputs) {
  auto state = std::make_unique<DeviceModelState>(inputs);
  if (core::Status status = state->init(inputs); !status.ok()) return status;
  return std::unique_ptr<ModelState>(std::move(state));
}

}  // namespace dslaunch::worker::engine
