#pragma once

#include <cstdint>
#include <istream>
#include <limits>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

// What `dslaunch plot` draws, read from a job directory's records (see
// launcher/controller/job_directory.h). Functions of the files' contents,
// which the caller reads; no state, thread-safe.
namespace dslaunch::plot {

inline constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

// One training step as rank 0 reported it in metrics.jsonl. A value the line
// lacks, or that is not finite, is kMissing (NaN: a gap in the curve).
struct StepPoint {
  int64_t step = 0;
  double loss = kMissing;
  double lr = kMissing;
  double tokens_per_s = kMissing;
  double grad_norm = kMissing;
  std::optional<double> eval_loss;  // on evaluation steps only
};

// A new attempt of the job (an automatic restart or `dslaunch resume`):
// attempt k, "restart k", went on from the checkpoint of `from_step` (0: it
// found none and started over).
struct Restart {
  int attempt = 0;
  int64_t from_step = 0;
};

// The steps of the training the job kept, in step order, from the lines of
// metrics.jsonl (read to its end): rank 0's step lines (lines with a "what", such as the
// memory report, are not steps). The controller appends lines as they come,
// so within an attempt rank 0's steps rise; a step that does not rise is a
// later attempt starting again from an earlier checkpoint. Its lines replace
// every kept step from there on: the later attempt's value wins, and the
// steps the restart threw away are dropped even where it did not reach them
// again. Lines that are not JSON (the torn last line of a running job) are
// skipped.
std::vector<StepPoint> steps_from_metrics(std::istream& metrics_jsonl);

// The restarts the "attempts" list of state.json records: every attempt
// after the first, in order. events.jsonl cannot give them: it records an
// attempt's start ("controller_started") but not the step it resumed from.
// Empty when the list is missing or holds one attempt.
std::vector<Restart> restarts_from_state(const nlohmann::json& state);

}  // namespace dslaunch::plot
