#include "worker/engine/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace dslaunch::worker::engine {
namespace {

constexpr double kScaleFactor = 2;  // DeepSpeed's, not configurable there either

LossScaler::Flavour flavour_of(const spec::Fp16Spec& fp16, int zero_stage) {
  if (!fp16.enabled) return LossScaler::Flavour::kNone;
  if (fp16.loss_scale > 0) return LossScaler::Flavour::kStatic;
  return zero_stage == 0 ? LossScaler::Flavour::kFp16Optimizer : LossScaler::Flavour::kZero;
}

}  // namespace

LossScaler::LossScaler(const spec::Fp16Spec& fp16, int zero_stage)
    : flavour_(flavour_of(fp16, zero_stage)), fp16_(fp16) {
  if (flavour_ == Flavour::kStatic) state_.scale = fp16.loss_scale;
  if (flavour_ == Flavour::kFp16Optimizer || flavour_ == Flavour::kZero) {
    state_.scale = std::ldexp(1.0, fp16.initial_scale_power);
  }
  state_.hysteresis_left = fp16.hysteresis;
}

std::string LossScaler::update(bool overflow) {
  if (overflow) ++state_.skipped_steps;
  LossScalerState& s = state_;
  const int64_t window = fp16_.loss_scale_window;
  switch (flavour_) {
    case Flavour::kNone:
    case Flavour::kStatic:
      break;
    case Flavour::kFp16Optimizer:
      if (overflow) {
        s.scale = std::max(s.scale / kScaleFactor, fp16_.min_loss_scale);
        s.last_overflow_iteration = s.iteration;
      } else {
        const int64_t stable = s.iteration - s.last_overflow_iteration - 1;
        if (stable > 0 && stable % window == 0) s.scale *= kScaleFactor;
      }
      break;
    case Flavour::kZero:
      if (overflow) {
        if (fp16_.hysteresis == 1 || s.hysteresis_left == 1) {
          if (s.scale == fp16_.min_loss_scale && fp16_.raise_error_at_min_scale) {
            return fmt::format(
                "step {}: the gradients overflow with the loss scale already at "
                "fp16.min_loss_scale ({}); fp16 cannot represent this model's gradients (try bf16, "
                "a lower learning rate, or gradient_clipping)",
                s.iteration + 1, fp16_.min_loss_scale);
          }
          s.scale = std::max(s.scale / kScaleFactor, fp16_.min_loss_scale);
        } else {
          --s.hysteresis_left;
        }
        s.last_overflow_iteration = s.iteration;
      } else {
        if (fp16_.consecutive_hysteresis) s.hysteresis_left = fp16_.hysteresis;
        if ((s.iteration - s.last_overflow_iteration) % window == 0) {
          if (!fp16_.consecutive_hysteresis) s.hysteresis_left = fp16_.hysteresis;
          s.scale *= kScaleFactor;
        }
      }
      break;
  }
  ++s.iteration;
  return "";
}

}  // namespace dslaunch::worker::engine
