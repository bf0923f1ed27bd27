#include "core/layout/pipeline_schedule.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <set>
#include <utility>

namespace dslaunch::core {
namespace {

// Gives each forward pass the lowest slot of its chunk that no micro-batch
// in flight holds, and its backward the same one.
void assign_slots(std::vector<ScheduledPass>& passes) {
  std::map<int, std::set<int>> busy;  // per chunk
  std::map<std::pair<int, int64_t>, int> held;
  for (ScheduledPass& pass : passes) {
    std::set<int>& slots = busy[pass.chunk];
    const std::pair<int, int64_t> key{pass.chunk, pass.micro_batch};
    if (pass.kind == PassKind::kForward) {
      int slot = 0;
      while (slots.count(slot) != 0) ++slot;
      slots.insert(slot);
      held[key] = slot;
      pass.slot = slot;
    } else {
      pass.slot = held.at(key);
      slots.erase(pass.slot);
      held.erase(key);
    }
  }
}

}  // namespace

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
  const int64_t warmup = std::min<int64_t>(stages - stage, micro_batches) - 1;
  std::vector<ScheduledPass> passes;
  passes.reserve(static_cast<size_t>(2 * micro_batches));
  int64_t forward = 0;
  int64_t backward = 0;
  for (; forward < warmup; ++forward) passes.push_back({PassKind::kForward, forward});
  for (; forward < micro_batches; ++forward, ++backward) {
    passes.push_back({PassKind::kForward, forward});
    passes.push_back({PassKind::kBackward, backward});
  }
  for (; backward < micro_batches; ++backward) passes.push_back({PassKind::kBackward, backward});
  assign_slots(passes);
  return passes;
}

std::vector<ScheduledPass> interleaved_schedule(int64_t micro_batches, int stages, int stage,
                                                int chunks) {
  const int64_t total = micro_batches * chunks;
  const int64_t group = static_cast<int64_t>(stages) * chunks;
  const auto pass = [&](PassKind kind, int64_t k) {
    const int in_group = static_cast<int>((k % group) / stages);
    const int chunk = kind == PassKind::kForward ? in_group : chunks - 1 - in_group;
    return ScheduledPass{kind, (k / group) * stages + k % stages, chunk};
  };
  const int64_t warmup = micro_batches == stages
                             ? total
                             : std::min<int64_t>(total, int64_t{stages - stage - 1} * 2 +
                                                            int64_t{chunks - 1} * stages);
  std::vector<ScheduledPass> passes;
  passes.reserve(static_cast<size_t>(2 * total));
  int64_t forward = 0;
  int64_t backward = 0;
  for (; forward < warmup; ++forward) passes.push_back(pass(PassKind::kForward, forward));
  for (; forward < total; ++forward, ++backward) {
    passes.push_back(pass(PassKind::kForward, forward));
    passes.push_back(pass(PassKind::kBackward, backward));
  }
  for (; backward < total; ++backward) passes.push_back(pass(PassKind::kBackward, backward));
  assign_slots(passes);
  return passes;
}

int schedule_slots(const std::vector<ScheduledPass>& schedule, int chunk) {
  int slots = 1;
  for (const ScheduledPass& pass : schedule) {
    if (pass.chunk == chunk) slots = std::max(slots, pass.slot + 1);
  }
  return slots;
}

}  // namespace dslaunch::core
