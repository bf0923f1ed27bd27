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
};

// Gradient accumulation on a single stage: each micro-batch's forward, then
// its backward (the model keeps one micro-batch's activations).
std::vector<ScheduledPass> accumulation_schedule(int64_t micro_batches);

}  // namespace dslaunch::worker::engine
