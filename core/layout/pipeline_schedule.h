#pragma once

#include <cstdint>
#include <vector>

namespace dslaunch::core {

// Which micro-batch runs forward and backward when, within one optimizer
// step, on one rank. The training loop runs the passes in order; pipeline
// schedules add their sends and receives between stages. The plan sizes a
// rank's activations by the slots its schedule uses.
enum class PassKind { kForward, kBackward };

struct ScheduledPass {
  PassKind kind = PassKind::kForward;
  int64_t micro_batch = 0;
  int chunk = 0;  // the model chunk (virtual stage) it runs; 0 without interleaving
  int slot = 0;   // where that chunk keeps this micro-batch's activations
};

// Gradient accumulation on a single stage: each micro-batch's forward, then
// its backward (the model keeps one micro-batch's activations).
std::vector<ScheduledPass> accumulation_schedule(int64_t micro_batches);

// PipeDream-Flush's 1F1B schedule (DeepSpeed's TrainSchedule, Megatron's
// non-interleaved one) for `stage` of `stages`: stages - stage - 1 warm-up
// forwards, then one forward and one backward at a time, then the
// remaining backwards. Micro-batches go forward and backward in order, so
// at most stages - stage are in flight. Needs micro_batches >= stages
// (checked by the caller).
std::vector<ScheduledPass> one_f_one_b_schedule(int64_t micro_batches, int stages, int stage);

// Megatron's interleaved 1F1B schedule for `stage` of `stages`, each
// running `chunks` model chunks (chunk k of stage s is virtual stage
// k * stages + s). Forward passes go through the chunks in groups of
// `stages` micro-batches (chunk 0's first group, chunk 1's, ..., then the
// next group), backward passes likewise from the last chunk down. Warm-up:
// (stages - stage - 1) * 2 + (chunks - 1) * stages forwards, or all of them
// when micro_batches == stages. The bubble shrinks by the factor `chunks`
// for more point-to-point traffic. Needs micro_batches a multiple of stages
// (checked by the caller).
std::vector<ScheduledPass> interleaved_schedule(int64_t micro_batches, int stages, int stage,
                                                int chunks);

// The activation slots chunk `chunk` uses in a schedule.
int schedule_slots(const std::vector<ScheduledPass>& schedule, int chunk = 0);

}  // namespace dslaunch::core
