#pragma once

#include <chrono>
#include <cstdio>
#include <optional>

#include "proto/dslaunch.pb.h"

namespace dslaunch::controller {

// What `dslaunch run` shows while the job runs: on a terminal, one line
// redrawn in place (state, a bar, step/total, loss, tokens/s, ETA, ranks);
// otherwise a plain log line (spdlog) at most every `plain_interval`, so logs
// stay short.
// Not thread-safe: the controller's loop drives it.
class ProgressDisplay {
 public:
  enum class Mode { kTerminal, kPlain, kOff };
  ProgressDisplay(Mode mode, FILE* out,
                  std::chrono::seconds plain_interval = std::chrono::seconds(10));

  // The terminal mode when `out` is a terminal, else plain.
  static Mode mode_for(FILE* out);

  void update(const v1::JobStatus& status, std::chrono::steady_clock::time_point now);
  // Ends the line (terminal) so later output starts clean.
  void finish();

  // The one-line summary, e.g. "RUNNING [#####.....] step 50/100 loss 2.314
  // 1.2k tok/s ETA 0:42 ranks 4/4". `eta` is empty when unknown.
  static std::string line(const v1::JobStatus& status, std::optional<std::chrono::seconds> eta,
                          bool with_bar);

 private:
  std::optional<std::chrono::seconds> eta(const v1::JobStatus& status,
                                          std::chrono::steady_clock::time_point now);

  Mode mode_;
  FILE* out_;
  std::chrono::seconds plain_interval_;
  std::optional<std::chrono::steady_clock::time_point> last_plain_;
  std::optional<std::chrono::steady_clock::time_point> first_step_time_;
  int64_t first_step_ = 0;
  bool drew_ = false;
};

}  // namespace dslaunch::controller
