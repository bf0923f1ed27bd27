#pragma once

#include <cstdint>
#include <vector>

namespace dslaunch::worker::engine {

// Which micro-batch runs forward and backward when, within one optimizer
// step. The training loop runs the passes in order; pipeline schedules
// (1F1B, interleaved) add their sends and receives between stages.
enum class PassKind { kForward, kBackward };

struct ScheduledPass {
  PassKind kind = PassKind::kForward;
  int64_t micro_batch = 0;
  int slot = 0;  // where the model keeps this micro-batch's activations
};

// Gradient accumulation on a single stage: each micro-batch's forward, then
// its backward (the model keeps one micro-batch's activations).
std::vector<ScheduledPass> accumulation_schedule(int64_t micro_batches);

// PipeDream-Flush's 1F1B schedule (DeepSpeed's TrainSchedule, Megatron's
// non-interleaved one) for `stage` of `stages`: stages - stage - 1 warm-up
// forwards, then one forward and one backward at a time, then the
// remaining backwards. Micro-batches go forward and backward in order;
// at most stages - stage are in flight, each in slot micro_batch mod that.
// Needs micro_batches >= stages (checked by the caller).
std::vector<ScheduledPass> one_f_one_b_schedule(int64_t micro_batches, int stages, int stage);

// The activation slots a stage's schedule uses.
int schedule_slots(const std::vector<ScheduledPass>& schedule);

}  // namespace dslaunch::worker::engine
