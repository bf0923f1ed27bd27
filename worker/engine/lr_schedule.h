#pragma once

#include <cstdint>

#include "core/spec/job_spec.h"

namespace dslaunch::worker::engine {

// The learning rate that optimizer step `step` uses under `scheduler`, equal to
// the one DeepSpeed's lr_schedules.py gives its engine's step of the same index.
//
// `step` counts optimizer steps from 0 (the first update of the run). DeepSpeed
// builds its scheduler at last_batch_iteration = -1 and steps it after each
// optimizer step, so step s runs with the rate of iteration s - 1:
//   - step 0 runs with warmup_min_lr (WarmupLR, WarmupDecayLR) or with 0
//     (WarmupCosineLR, whose rate before its first step() is 0);
//   - step s >= 1 runs with the scheduler's formula at iteration i = s - 1.
// With W = max(2, warmup_num_steps) and warmup fraction f(i) = ln(i + 1) / ln(W)
// ("log") or i / W ("linear"):
//   kNone:          base_lr at every step.
//   WarmupLR:       min + (max - min) * (i < W ? f(i) : 1); base_lr is ignored.
//   WarmupDecayLR:  as WarmupLR during warmup, then
//                   min + (max - min) * max(0, (total - i) / max(1, total - W)):
//                   linear decay that reaches warmup_min_lr at i = total_num_steps
//                   and stays there; base_lr is ignored.
//   WarmupCosineLR: base_lr * ratio, ratio = warmup_min_ratio + f(i) * (1 - warmup_min_ratio)
//                   during warmup, then with k = i - W + 1 and K = total - W:
//                   max(0, cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi * k / K)) / 2).
//                   Like DeepSpeed, the cosine is not clamped past total_num_steps
//                   (the rate rises again); where K = 0, where DeepSpeed would
//                   divide by zero, the ratio is cos_min_ratio.
// Only steps whose update is applied count: DeepSpeed does not step its
// scheduler on an fp16 overflow.
// Pure function; thread-safe.
double learning_rate(const spec::SchedulerSpec& scheduler, double base_lr, int64_t step);

}  // namespace dslaunch::worker::engine
