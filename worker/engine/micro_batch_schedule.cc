#include "worker/engine/micro_batch_schedule.h"

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

}  // namespace dslaunch::worker::engine
