#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace dslaunch::bench {

// The median wall time of `runs` calls of `work`, in milliseconds: robust to
// the odd slow run on a shared 2-core machine.
inline double median_ms(int runs, const std::function<void()>& work) {
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace dslaunch::bench
