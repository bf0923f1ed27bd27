#pragma once

#include <chrono>

namespace dslaunch::controller {

// Time as the controller sees it; tests step a fake one by hand instead of
// sleeping. Implementations must be thread-safe.
class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
};

// The real monotonic clock.
class SteadyClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
};

}  // namespace dslaunch::controller
