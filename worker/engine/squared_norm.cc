#include "worker/engine/squared_norm.h"

#include <algorithm>

namespace dslaunch::worker::engine {

double sum_of_squares_in(kernels::Backend& backend, const float* grads, int64_t base, int64_t begin,
                         int64_t end, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  if (ranges.empty()) return backend.sum_of_squares(grads + (begin - base), end - begin);
  double sum = 0;
  for (const auto& [range_begin, range_end] : ranges) {
    const int64_t from = std::max(range_begin, begin);
    const int64_t to = std::min(range_end, end);
    if (from < to) sum += backend.sum_of_squares(grads + (from - base), to - from);
  }
  return sum;
}

double sum_of_squares_by_partition(kernels::Backend& backend, const float* grads,
                                   const ZeroPartition& partition,
                                   const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  double sum = 0;
  for (int r = 0; r < partition.ranks; ++r) {
    sum += sum_of_squares_in(backend, grads, 0, partition.begin(r), partition.end(r), ranges);
  }
  return sum;
}

}  // namespace dslaunch::worker::engine
