#include "worker/engine/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace dslaunch::worker::engine {
namespace {

using spec::SchedulerSpec;
using spec::SchedulerType;
using spec::WarmupType;

// DeepSpeed clamps the warmup length to 2 so that ln(W) is never 0.
int64_t warmup_steps(const SchedulerSpec& scheduler) {
  return std::max<int64_t>(2, scheduler.warmup_num_steps);
}

// Fraction of the warmup done at iteration 0 <= i < W.
double warmup_fraction(const SchedulerSpec& scheduler, int64_t iteration) {
  const double warmup = static_cast<double>(warmup_steps(scheduler));
  if (scheduler.warmup_type == WarmupType::kLinear) return static_cast<double>(iteration) / warmup;
  // DeepSpeed multiplies by a precomputed 1 / ln(W); so does this, to the bit.
  return (1.0 / std::log(warmup)) * std::log(static_cast<double>(iteration + 1));
}

double warmup_decay_gamma(const SchedulerSpec& scheduler, int64_t iteration) {
  const int64_t warmup = warmup_steps(scheduler);
  if (iteration < warmup) return warmup_fraction(scheduler, iteration);
  const double remaining = static_cast<double>(scheduler.total_num_steps - iteration);
  const double decay_steps = std::max(1.0, static_cast<double>(scheduler.total_num_steps - warmup));
  return std::max(0.0, remaining / decay_steps);
}

double warmup_cosine_ratio(const SchedulerSpec& scheduler, int64_t iteration) {
  const int64_t warmup = warmup_steps(scheduler);
  if (iteration < warmup) {
    return scheduler.warmup_min_ratio +
           warmup_fraction(scheduler, iteration) * (1.0 - scheduler.warmup_min_ratio);
  }
  const int64_t decay_steps = scheduler.total_num_steps - warmup;
  if (decay_steps == 0) return scheduler.cos_min_ratio;
  // Same operation order as DeepSpeed's pi * k / K, so the rates agree to the last bit.
  const double angle = std::numbers::pi * static_cast<double>(iteration - warmup + 1) /
                       static_cast<double>(decay_steps);
  const double cosine = (1.0 + std::cos(angle)) / 2.0;
  return std::max(0.0, scheduler.cos_min_ratio + (1.0 - scheduler.cos_min_ratio) * cosine);
}

}  // namespace

double learning_rate(const SchedulerSpec& scheduler, double base_lr, int64_t step) {
  const int64_t iteration = step - 1;  // DeepSpeed's last_batch_iteration during this step
  const double min_lr = scheduler.warmup_min_lr;
  const double delta_lr = scheduler.warmup_max_lr - scheduler.warmup_min_lr;
  switch (scheduler.type) {
    case SchedulerType::kNone:
      return base_lr;
    case SchedulerType::kWarmupLR:
      if (iteration < 0) return min_lr;
      return min_lr + delta_lr * (iteration < warmup_steps(scheduler)
                                      ? warmup_fraction(scheduler, iteration)
                                      : 1.0);
    case SchedulerType::kWarmupDecayLR:
      if (iteration < 0) return min_lr;
      return min_lr + delta_lr * warmup_decay_gamma(scheduler, iteration);
    case SchedulerType::kWarmupCosineLR:
      if (iteration < 0) return 0.0;
      return base_lr * warmup_cosine_ratio(scheduler, iteration);
  }
  return base_lr;
}

}  // namespace dslaunch::worker::engine
