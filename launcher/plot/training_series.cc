#include "launcher/plot/training_series.h"

#include <cmath>
#include <string>

#include "core/json_input.h"

namespace dslaunch::plot {
namespace {

double number_or_missing(const nlohmann::json& line, const char* key) {
  const auto value = line.find(key);
  if (value == line.end() || !value->is_number()) return kMissing;
  const double number = value->get<double>();
  return std::isfinite(number) ? number : kMissing;
}

int64_t integer_or(const nlohmann::json& object, const char* key, int64_t fallback) {
  const auto value = object.find(key);
  return value != object.end() && value->is_number_integer() ? value->get<int64_t>() : fallback;
}

// A training step line of rank 0, or nullopt for any other line.
std::optional<StepPoint> rank0_step(const std::string& text) {
  std::string ignored;
  const std::optional<nlohmann::json> line = core::parse_untrusted_json(text, ignored);
  if (!line || !line->is_object() || line->contains("what")) return std::nullopt;
  const auto rank = line->find("rank");
  const auto step = line->find("step");
  if (rank == line->end() || *rank != 0 || step == line->end() || !step->is_number_integer()) {
    return std::nullopt;
  }
  StepPoint point;
  point.step = step->get<int64_t>();
  point.loss = number_or_missing(*line, "loss");
  point.lr = number_or_missing(*line, "lr");
  point.tokens_per_s = number_or_missing(*line, "tokens_per_s");
  point.grad_norm = number_or_missing(*line, "grad_norm");
  // A step fp16 skipped for overflowing reports a gradient norm of -1.
  if (point.grad_norm < 0) point.grad_norm = kMissing;
  const double eval_loss = number_or_missing(*line, "eval_loss");
  if (!std::isnan(eval_loss)) point.eval_loss = eval_loss;
  return point;
}

}  // namespace

std::vector<StepPoint> steps_from_metrics(std::istream& metrics_jsonl) {
  std::vector<StepPoint> kept;
  for (std::string line; std::getline(metrics_jsonl, line);) {
    const std::optional<StepPoint> point = rank0_step(line);
    if (!point) continue;
    // `kept` is in step order, so what the new attempt replaces is its tail.
    while (!kept.empty() && kept.back().step >= point->step) kept.pop_back();
    kept.push_back(*point);
  }
  return kept;
}

std::vector<Restart> restarts_from_state(const nlohmann::json& state) {
  std::vector<Restart> restarts;
  const auto attempts = state.find("attempts");
  if (attempts == state.end() || !attempts->is_array()) return restarts;
  for (size_t i = 1; i < attempts->size(); ++i) {
    const nlohmann::json& attempt = (*attempts)[i];
    if (!attempt.is_object()) continue;
    Restart restart;
    restart.attempt = static_cast<int>(integer_or(attempt, "attempt", static_cast<int64_t>(i)));
    restart.from_step = integer_or(attempt, "resumed_from_step", 0);
    restarts.push_back(restart);
  }
  return restarts;
}

}  // namespace dslaunch::plot
