#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint/shard_file.h"
#include "core/layout/parameter_table.h"
#include "core/spec/job_spec.h"
#include "core/spec/precision.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "worker/comm/communicator.h"
#include "worker/engine/trainer.h"
#include "worker/model/gpt2_model.h"

namespace dslaunch::worker::engine {

// Where the parameters, gradients and optimizer states of one rank live and
// how they are reduced and updated: ZeRO stages 0-3 today (CPU/NVMe offload
// next). The training loop drives it through one step:
//
//   begin_step()
//   per micro-batch: backward into gradients_for_backward(), reporting
//     ranges to grads_ready() when reduces_micro_batch(), then
//     finish_backward()
//   norm_share() summed over the data group -> grad_norm() -> clip()
//   optimizer_step(lr)
//
// Calls come from the loop's thread, in that order, on every rank alike.
class ModelState {
 public:
  virtual ~ModelState() = default;

  // What the model reads in forward and backward (stage 3: a workspace
  // gathered around each block's use through parameter_source()).
  virtual const float* parameters_for_model() = 0;
  // Whether parameters_for_model() is the whole layout, resident, and
  // changed only by optimizer_step() (not so at ZeRO stage 3).
  virtual bool parameters_resident() const = 0;
  // Where backward accumulates this step's gradients (the whole layout).
  virtual float* gradients_for_backward() = 0;
  // After the step's last finish_backward(): the whole layout's reduced
  // gradients, or nullptr where each rank keeps only its partition (ZeRO
  // stages 2 and 3).
  virtual float* reduced_gradients() = 0;

  virtual void begin_step() = 0;
  // Whether backward of micro-batch `index` (of `count` this step) hands
  // its finished ranges to grads_ready(), to be reduced as it runs.
  virtual bool reduces_micro_batch(int64_t index, int64_t count) const = 0;
  virtual void grads_ready(int64_t begin, int64_t end) = 0;
  // After each micro-batch's backward: waits for its reductions (when it
  // reduced) and reports what failed in the backward pass (stage 3's gathers).
  virtual core::Status finish_backward(bool reduced) = 0;

  // This rank's term of the squared global gradient norm, to be summed over
  // the data group in rank order; squared_grad_norm() takes that sum and
  // gives the squared norm of the gradients this rank's tensor slice counts
  // (ModelStateInputs::norm_ranges), which the tensor group sums.
  virtual double norm_share() = 0;
  // What failed computing norm_share() (reading swapped gradients), which
  // then is NaN: the loop stops every rank on it.
  virtual core::Status norm_status() const { return {}; }
  virtual double squared_grad_norm(double summed_shares) = 0;
  virtual void clip(float factor) = 0;
  // The optimizer's step at learning rate `lr`, and whatever makes the
  // parameters whole again for the next forward.
  virtual core::Status optimizer_step(double lr) = 0;
  // Whether that step averaged over the data group compressed.
  virtual bool compressed_last_step() const { return false; }

  // Around a forward-only pass (evaluation): called after it, and the
  // status of what it gathered.
  virtual std::function<void()> after_forward_only() = 0;
  virtual core::Status forward_only_status() = 0;

  // This rank's part of a checkpoint after `step` steps: the elements ZeRO's
  // partition over the data group gives it, whatever the stage.
  // Offloaded moments are read back into memory held until the next step.
  virtual core::StatusOr<CheckpointSlice> checkpoint_slice(int64_t step) = 0;

  // What this rank holds, by kind (the models' activations as given).
  virtual MemoryReport memory_report(int64_t activation_bytes) = 0;
  // The whole parameters (gathered on every rank).
  virtual core::StatusOr<std::vector<float>> final_parameters() = 0;
  // Whether the parameters are never whole in memory (ZeRO stage 3, its
  // partitions perhaps in swap files): then read_final_parameters() gives
  // floats [from, to) of what final_parameters() would, a range at a time.
  // Over several data ranks it is collective: every rank must make the same
  // calls.
  virtual bool streams_final_parameters() const { return false; }
  virtual core::Status read_final_parameters(int64_t /*from*/, int64_t /*to*/, float* /*out*/) {
    return core::Status(core::StatusCode::kFailedPrecondition,
                        "the final parameters are not read a range at a time here");
  }
};

using spec::gradient_communication_type;

struct ModelStateInputs {
  const spec::TrainingSpec* training = nullptr;
  const core::ParameterTable* table = nullptr;
  const std::vector<core::LayoutTensor>* layout = nullptr;  // of table
  comm::Communicator* data_comm = nullptr;
  kernels::Backend* backend = nullptr;
  // Training on a GPU without offload_optimizer: the GPU, whose memory then
  // holds every model state and whose kernels take the whole step
  // (make_device_model_state). Null: the states are in `backend`'s memory.
  kernels::Backend* optimizer_device = nullptr;
  // With optimizer_device and offload_optimizer.ratio below 1 (device cpu):
  // the host backend whose CPU Adam updates the share of this rank's
  // optimizer states kept in host memory (core::host_optimizer_elements()).
  kernels::Backend* host_optimizer_backend = nullptr;
  // With optimizer_device and several data ranks: the data group's
  // communicator over that device's memory (NCCL's on a GPU), on which the
  // gradients are averaged and the partitions gathered there.
  comm::Communicator* device_data_comm = nullptr;
  model::Gpt2Model* model = nullptr;  // gets stage 3's parameter source
  // The parameters to start from, a range at a time: out[0, end - begin) =
  // floats [begin, end) of the layout (the spec's initialisation, init_from's
  // weights or the checkpoint's). Each state asks only for what it keeps, so
  // a ZeRO stage 3 rank never holds the whole model.
  std::function<core::Status(int64_t begin, int64_t end, float* out)> initial_parameters;
  // kF32, or kBF16/kF16 for 16-bit training: fp32 masters, the model's
  // weights and gradients rounded to this format.
  core::DType precision = core::DType::kF32;
  // The element ranges of the layout whose gradients count in this rank's
  // part of the global norm, in increasing order; empty: all. Under tensor
  // parallelism, the split tensors everywhere and the replicated ones on
  // tensor rank 0 only, so that each element of the model counts once.
  std::vector<std::pair<int64_t, int64_t>> norm_ranges;
  // Resuming: the checkpoint's shards (for the optimizer's moments) and the
  // optimizer steps taken.
  const std::vector<core::ShardLocation>* resume_shards = nullptr;
  int64_t resume_optimizer_steps = 0;
  // What a resume changed that the user should hear of (the error feedback
  // of compressed communication starting again); unset: nothing is said.
  std::function<void(const std::string&)> notice;
};

// The ZeRO stage of training.zero over the data group.
core::StatusOr<std::unique_ptr<ModelState>> make_zero_model_state(ModelStateInputs inputs);

// Training on a GPU with its optimizer there (ModelStateInputs::
// optimizer_device, ZeRO stages 0-2; several data ranks with a
// device_data_comm): every model state in the GPU's memory, and the whole
// step there. make_zero_model_state() chooses it.
core::StatusOr<std::unique_ptr<ModelState>> make_device_model_state(ModelStateInputs inputs);

// ZeRO stage 0 with Lamb or a compressed optimizer (WholeModelOptimizer),
// which sees the whole model on every rank.
core::StatusOr<std::unique_ptr<ModelState>> make_whole_model_state(ModelStateInputs inputs);

}  // namespace dslaunch::worker::engine
