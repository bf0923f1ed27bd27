#include "launcher/plot/training_series.h"

#include <cmath>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <catch2/catch.hpp>

namespace dslaunch::plot {
namespace {

// A metrics.jsonl step line as the controller writes it for `rank`.
std::string step_line(int rank, int64_t step, double loss, const std::string& extra = "") {
  return fmt::format(R"({{"grad_norm":2.5,"loss":{},"lr":0.001,"rank":{},"step":{},"time_ms":1,)"
                     R"("tokens_per_s":{}{}}})"
                     "\n",
                     loss, rank, step, 100.0 * rank + step, extra);
}

std::vector<StepPoint> steps_of(const std::string& text) {
  std::istringstream in(text);
  return steps_from_metrics(in);
}

std::vector<int64_t> step_numbers(const std::vector<StepPoint>& points) {
  std::vector<int64_t> steps;
  for (const StepPoint& point : points) steps.push_back(point.step);
  return steps;
}

}  // namespace

TEST_CASE("rank 0's step lines are the series; memory lines, other ranks and torn lines are not") {
  const std::string text =
      R"({"rank":0,"step":0,"time_ms":1,"what":"memory","parameters_bytes":10.0})"
      "\n" +
      step_line(0, 1, 5.5) + step_line(1, 1, 9.9) + step_line(0, 2, 5.25, R"(,"eval_loss":5.75)") +
      step_line(1, 2, 9.8) +
      R"({"rank":0,"step":3,"lo)";  // a running job's last line, half written
  const std::vector<StepPoint> steps = steps_of(text);
  REQUIRE(step_numbers(steps) == std::vector<int64_t>{1, 2});
  CHECK(steps[0].loss == 5.5);
  CHECK(steps[0].lr == 0.001);
  CHECK(steps[0].tokens_per_s == 1.0);
  CHECK(steps[0].grad_norm == 2.5);
  CHECK_FALSE(steps[0].eval_loss);
  CHECK(steps[1].loss == 5.25);
  REQUIRE(steps[1].eval_loss);
  CHECK(*steps[1].eval_loss == 5.75);
}

TEST_CASE("steps an attempt ran again after a restart take the later attempt's values") {
  // Attempt 0 trains steps 1-6; attempt 1 resumes from the checkpoint of
  // step 4 and runs 5-8.
  std::string text;
  for (int step = 1; step <= 6; ++step) text += step_line(0, step, 10.0 + step);
  for (int step = 5; step <= 8; ++step) {
    text += step_line(0, step, 20.0 + step, step == 6 ? R"(,"eval_loss":1.5)" : "");
  }
  const std::vector<StepPoint> steps = steps_of(text);
  REQUIRE(step_numbers(steps) == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8});
  for (int i = 0; i < 4; ++i) CHECK(steps[i].loss == 11.0 + i);
  for (int i = 4; i < 8; ++i) CHECK(steps[i].loss == 21.0 + i);
  REQUIRE(steps[5].eval_loss);
  CHECK(*steps[5].eval_loss == 1.5);
}

TEST_CASE("steps a restart threw away are dropped even where the new attempt did not reach them") {
  // Attempt 0 trains to step 10; attempt 1 resumes from step 4 and fails
  // at step 6; attempt 2 resumes from step 4 again and fails at step 5.
  std::string text;
  for (int step = 1; step <= 10; ++step) text += step_line(0, step, 10.0 + step);
  for (int step = 5; step <= 6; ++step) text += step_line(0, step, 20.0 + step);
  text += step_line(0, 5, 30.0 + 5);
  const std::vector<StepPoint> steps = steps_of(text);
  REQUIRE(step_numbers(steps) == std::vector<int64_t>{1, 2, 3, 4, 5});
  CHECK(steps[3].loss == 14.0);
  CHECK(steps[4].loss == 35.0);
}

TEST_CASE("an attempt that found no checkpoint replaces the whole series") {
  std::string text;
  for (int step = 1; step <= 3; ++step) text += step_line(0, step, 10.0 + step);
  for (int step = 1; step <= 2; ++step) text += step_line(0, step, 20.0 + step);
  const std::vector<StepPoint> steps = steps_of(text);
  REQUIRE(step_numbers(steps) == std::vector<int64_t>{1, 2});
  CHECK(steps[0].loss == 21.0);
  CHECK(steps[1].loss == 22.0);
}

TEST_CASE("an attempt resumed from the last step trained goes on without replacing any") {
  std::string text;
  for (int step = 1; step <= 3; ++step) text += step_line(0, step, 10.0 + step);
  for (int step = 4; step <= 5; ++step) text += step_line(0, step, 20.0 + step);
  const std::vector<StepPoint> steps = steps_of(text);
  REQUIRE(step_numbers(steps) == std::vector<int64_t>{1, 2, 3, 4, 5});
  CHECK(steps[2].loss == 13.0);
  CHECK(steps[3].loss == 24.0);
}

TEST_CASE("missing and meaningless values are gaps") {
  // fp16 reports a gradient norm of -1 for a step skipped on overflow.
  const std::string text = R"({"rank":0,"step":1,"loss":3.0,"grad_norm":-1.0,"lr":"high"})"
                           "\n";
  const std::vector<StepPoint> steps = steps_of(text);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].loss == 3.0);
  CHECK(std::isnan(steps[0].grad_norm));
  CHECK(std::isnan(steps[0].lr));
  CHECK(std::isnan(steps[0].tokens_per_s));
}

TEST_CASE("every attempt after the first in state.json is a restart from its resume step") {
  const nlohmann::json state = nlohmann::json::parse(R"({
    "attempts": [
      {"attempt": 0, "last_step": 50, "reason": "rank 1 exited with code 1",
       "resumed_from_step": 0, "state": "FAILED"},
      {"attempt": 1, "last_step": 45, "reason": "rank 0 lost", "resumed_from_step": 40,
       "state": "FAILED"},
      {"attempt": 2, "last_step": 100, "reason": "", "resumed_from_step": 40,
       "state": "SUCCEEDED"}
    ]})");
  const std::vector<Restart> restarts = restarts_from_state(state);
  REQUIRE(restarts.size() == 2);
  CHECK(restarts[0].attempt == 1);
  CHECK(restarts[0].from_step == 40);
  CHECK(restarts[1].attempt == 2);
  CHECK(restarts[1].from_step == 40);
}

TEST_CASE("a job of one attempt, or a state.json without attempts, has no restart") {
  CHECK(restarts_from_state(
            nlohmann::json::parse(R"({"attempts": [{"attempt": 0, "resumed_from_step": 0}]})"))
            .empty());
  CHECK(restarts_from_state(nlohmann::json::parse(R"({"state": "RUNNING"})")).empty());
}

}  // namespace dslaunch::plot
