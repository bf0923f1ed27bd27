#include "launcher/controller/progress.h"

#include <unistd.h>

#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace dslaunch::controller {
namespace {

constexpr int kBarWidth = 20;

std::string duration_text(std::chrono::seconds seconds) {
  const long long s = seconds.count();
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string rate_text(double tokens_per_s) {
  if (tokens_per_s >= 1e6) return fmt::format("{:.1f}M", tokens_per_s / 1e6);
  if (tokens_per_s >= 1e3) return fmt::format("{:.1f}k", tokens_per_s / 1e3);
  return fmt::format("{:.0f}", tokens_per_s);
}

}  // namespace

ProgressDisplay::ProgressDisplay(Mode mode, FILE* out, std::chrono::seconds plain_interval)
    : mode_(mode), out_(out), plain_interval_(plain_interval) {}

ProgressDisplay::Mode ProgressDisplay::mode_for(FILE* out) {
  return isatty(fileno(out)) ? Mode::kTerminal : Mode::kPlain;
}

std::string ProgressDisplay::line(const v1::JobStatus& status,
                                  std::optional<std::chrono::seconds> eta, bool with_bar) {
  std::string text = status.state();
  const int64_t total = status.total_steps();
  if (with_bar && total > 0) {
    const int filled =
        static_cast<int>(kBarWidth * std::min<int64_t>(status.step(), total) / total);
    text += " [" + std::string(filled, '#') + std::string(kBarWidth - filled, '.') + "]";
  }
  text += total > 0 ? fmt::format(" step {}/{}", status.step(), total)
                    : fmt::format(" step {}", status.step());
  if (status.loss() != 0) text += fmt::format(" loss {:.4f}", status.loss());
  if (status.tokens_per_s() > 0) text += " " + rate_text(status.tokens_per_s()) + " tok/s";
  if (eta) text += " ETA " + duration_text(*eta);
  int running = 0;
  for (const v1::RankStatus& rank : status.ranks()) running += rank.state() == "running" ? 1 : 0;
  text += fmt::format(" ranks {}/{}", running, status.world_size());
  return text;
}

std::optional<std::chrono::seconds> ProgressDisplay::eta(
    const v1::JobStatus& status, std::chrono::steady_clock::time_point now) {
  if (status.step() > 0 && !first_step_time_) {
    first_step_time_ = now;
    first_step_ = status.step();
  }
  const int64_t done = status.step() - first_step_;
  if (!first_step_time_ || done <= 0 || status.total_steps() <= status.step()) return std::nullopt;
  const double seconds_per_step =
      std::chrono::duration<double>(now - *first_step_time_).count() / static_cast<double>(done);
  return std::chrono::seconds(
      static_cast<long long>(seconds_per_step * (status.total_steps() - status.step())));
}

void ProgressDisplay::update(const v1::JobStatus& status,
                             std::chrono::steady_clock::time_point now) {
  const auto remaining = eta(status, now);
  if (mode_ == Mode::kTerminal) {
    // \r and clear-to-end-of-line redraw the same line.
    fmt::print(out_, "\r{}\x1b[K", line(status, remaining, true));
    fflush(out_);
    drew_ = true;
  } else if (mode_ == Mode::kPlain && (!last_plain_ || now - *last_plain_ >= plain_interval_)) {
    // Off a terminal (a batch job's output file) the line is a log line.
    spdlog::info("{}", line(status, remaining, false));
    last_plain_ = now;
  }
}

void ProgressDisplay::finish() {
  if (mode_ == Mode::kTerminal && drew_) {
    fmt::print(out_, "\n");
    fflush(out_);
  }
  drew_ = false;
}

}  // namespace dslaunch::controller
