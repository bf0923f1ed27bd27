#include "worker/engine/moment_resume.h"

#include <algorithm>
#include <string>
#include <utility>

namespace dslaunch::worker::engine {

core::Status resume_moments(AdamW& optimizer, const std::vector<core::ShardLocation>& shards,
                            const std::vector<core::LayoutTensor>& layout, int64_t begin,
                            int64_t count, int64_t optimizer_steps) {
  const int64_t group = optimizer.moment_group();
  std::vector<float> first(std::min(group, count));
  std::vector<float> second(first.size());
  for (int64_t from = 0; from < count; from += group) {
    const int64_t n = std::min(group, count - from);
    for (const auto& [kind, moment] : {std::pair{core::StateKind::kAdamM, first.data()},
                                       std::pair{core::StateKind::kAdamV, second.data()}}) {
      if (std::string error; !core::read_flat_range(shards, layout, kind, begin + from,
                                                    begin + from + n, moment, error)) {
        return core::Status(core::StatusCode::kDataLoss, error);
      }
    }
    if (core::Status status = optimizer.set_moments(from, n, first.data(), second.data());
        !status.ok()) {
      return status;
    }
  }
  optimizer.set_steps_taken(optimizer_steps);
  return {};
}

}  // namespace dslaunch::worker::engine
