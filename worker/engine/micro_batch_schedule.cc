#include "worker/engine/micro_batch_schedule.h"

#include <algorithm>
#include <cstddef>

namespace dslaunch::worker::engine {

std::vector<ScheduledPass> accumulation_schedule(int64_t micro_batches) {
  std::vector<ScheduledPass> passes;
  passes.reserve(static_cast<size_t>(2 * micro_batches));
  for (int64_t m = 0; m < micro_batches; ++m) {
    passes.push_back({PassKind::kForward, m});
    passes.push_back({PassKind::kBackward, m});
  }
  return passes;
}

std::vector<ScheduledPass> one_f_one_b_schedule(int64_t micro_batches, int stages, int stage) {
  const int64_t in_flight = std::min<int64_t>(stages - stage, micro_batches);
  const int64_t warmup = in_flight - 1;
  const auto slot = [in_flight](int64_t m) { return static_cast<int>(m % in_flight); };
  std::vector<ScheduledPass> passes;
  passes.reserve(static_cast<size_t>(2 * micro_batches));
  int64_t forward = 0;
  int64_t backward = 0;
  for (; forward < warmup; ++forward) passes.push_back({PassKind::kForward, forward, slot(forward)});
  for (; forward < micro_batches; ++forward, ++backward) {
    passes.push_back({PassKind::kForward, forward, slot(forward)});
    passes.push_back({PassKind::kBackward, backward, slot(backward)});
  }
  for (; backward < micro_batches; ++backward) {
    passes.push_back({PassKind::kBackward, backward, slot(backward)});
  }
  return passes;
}

int schedule_slots(const std::vector<ScheduledPass>& schedule) {
  int slots = 1;
  for (const ScheduledPass& pass : schedule) slots = std::max(slots, pass.slot + 1);
  return slots;
}

}  // namespace dslaunch::worker::engine
