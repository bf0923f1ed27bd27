#pragma once

#include <cstdint>
#include <string>

#include "core/checkpoint/shard_file.h"
#include "core/spec/job_spec.h"

namespace dslaunch::worker::engine {

// fp16 training's loss scale, with DeepSpeed's semantics. The loss is
// multiplied by scale() before backward so small gradients survive fp16; a
// step whose gradients overflow (a non-finite global norm) is skipped on
// every rank and the scale updated. DeepSpeed has two dynamic scalers, and
// which one a job gets depends on the ZeRO stage, as in DeepSpeed:
// - ZeRO stage 0 (its FP16_Optimizer): an overflow halves the scale, never
//   below min_loss_scale; after an overflow at iteration o the scale doubles
//   at each iteration i with (i - o - 1) > 0 and (i - o - 1) % window == 0.
//   No hysteresis.
// - ZeRO stages 1-3 (its DynamicLossScaler): `hysteresis` overflows are
//   tolerated before the scale is halved (the count resets when the scale
//   grows, or after every good step with consecutive_hysteresis); an
//   overflow with the scale already at min_loss_scale ends the run (unless
//   raise_error_at_min_scale is false); the scale doubles at each good
//   iteration i with (i - o) % window == 0.
// A static scale (fp16.loss_scale > 0) never changes; its overflowing steps
// are skipped too. Without fp16 the scale is 1 and nothing overflows here
// (a non-finite gradient fails the step instead).
using core::LossScalerState;

class LossScaler {
 public:
  enum class Flavour { kNone, kStatic, kFp16Optimizer, kZero };

  // From the spec's fp16 section and ZeRO stage.
  LossScaler(const spec::Fp16Spec& fp16, int zero_stage);

  Flavour flavour() const { return flavour_; }
  // Whether this scaler skips overflowing steps (fp16) or not (fp32, bf16).
  bool skips_overflow() const { return flavour_ != Flavour::kNone; }
  double scale() const { return state_.scale; }
  const LossScalerState& state() const { return state_; }
  void restore(const LossScalerState& state) { state_ = state; }

  // After a step's gradients are known: updates the scale. "" or why the run
  // must end (an overflow at the minimum scale, as DeepSpeed raises).
  std::string update(bool overflow);

 private:
  Flavour flavour_;
  spec::Fp16Spec fp16_;
  LossScalerState state_;
};

}  // namespace dslaunch::worker::engine
