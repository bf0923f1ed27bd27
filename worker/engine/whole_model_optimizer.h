#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint/shard_file.h"
#include "core/layout/parameter_table.h"
#include "core/spec/job_spec.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "worker/comm/communicator.h"

namespace dslaunch::worker::engine {

// One named array of an optimizer's own state, saved with its rank's shard
// (core::RankState): `count` elements of `dtype` (kF32 or kF64) at `data`,
// written in place when a checkpoint is resumed.
struct OptimizerArray {
  std::string name;
  core::DType dtype = core::DType::kF32;
  int64_t count = 0;
  void* data = nullptr;
  // This data rank's alone (error feedback, local steps): meaningful only
  // in the same place of a data group of the same size; otherwise the same
  // on every data rank.
  bool data_rank_own = false;
};

// The optimizers of ZeRO stage 0 that see the whole model on every rank and
// may take the data group's averaging into their own hands: Lamb, and the
// compressed ones, 1-bit Adam, 0/1 Adam and 1-bit LAMB (DeepSpeed's
// OnebitAdam, ZeroOneAdam, OnebitLamb), which after a warm-up average their
// momentum (or, 0/1 Adam, their gradients and local updates) through the
// 1-bit CompressedAllReduce instead of the gradients at full precision.
//
// Unlike DeepSpeed's, whose first step() only sets up buffers, every step
// updates; steps count from 1.
class WholeModelOptimizer {
 public:
  virtual ~WholeModelOptimizer() = default;

  // Whether optimizer step `step` needs the gradients averaged over the
  // data group before it (at full precision, as backward's reducer does);
  // otherwise step() gets this rank's own gradients.
  virtual bool averages_gradients(int64_t step) const = 0;
  // Step steps_taken() + 1 at learning rate `lr` over the whole layout;
  // `grads` may be used as scratch.
  virtual core::Status step(float* params, float* grads, double lr) = 0;
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }

  // Whether the step just taken averaged anything compressed.
  virtual bool compressed_last_step() const { return false; }
  // Bytes of state it holds (moments, error feedback, and the rest), and of
  // its compressed collective's message buffers.
  virtual int64_t state_bytes() const = 0;
  virtual int64_t buffer_bytes() const { return 0; }

  // The layout's arrays a checkpoint keeps beside the parameters: Adam's
  // moments (and 1-bit LAMB's fresh variance), each total floats; a
  // resumed run fills them before its first step.
  virtual std::vector<std::pair<core::StateKind, float*>> layout_state() = 0;
  // The parameters a checkpoint keeps when they are not the ones the model
  // reads: 0/1 Adam's weights of the last synchronisation, the same on
  // every rank (between syncs each rank's own drift from them). Null: the
  // model's.
  virtual const float* synchronized_parameters() const { return nullptr; }
  // After a resume set everything (layout_state(), scalars, rank_arrays()
  // or restart_error_feedback()): `params`, the checkpoint's whole
  // parameters, become the ones the model reads (0/1 Adam adds the rank's
  // drift since the last synchronisation).
  virtual void resumed(float* params) { (void)params; }
  // This rank's own state, for its shard; filled in place on resume.
  virtual std::map<std::string, double> scalars() const { return {}; }
  virtual void set_scalars(const std::map<std::string, double>& scalars) { (void)scalars; }
  virtual std::vector<OptimizerArray> rank_arrays() { return {}; }
  // Resuming in another data group: drops what rank_arrays() marks as the
  // data rank's own (the error feedback starts again from zero, as
  // DeepSpeed's does on every resume).
  virtual void restart_error_feedback() {}

 protected:
  int64_t steps_ = 0;
};

// For optimizer types kLamb, kOneBitAdam, kZeroOneAdam and kOneBitLamb: the
// optimizer over `table` on every rank of `data` (which must outlive it).
std::unique_ptr<WholeModelOptimizer> make_whole_model_optimizer(const spec::OptimizerSpec& spec,
                                                                const core::ParameterTable& table,
                                                                comm::Communicator& data,
                                                                kernels::Backend& backend);

}  // namespace dslaunch::worker::engine
