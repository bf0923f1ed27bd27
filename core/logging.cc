#include "core/logging.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace dslaunch::core {
namespace {

namespace level = spdlog::level;

// Passes the lines whose level lies in [lowest, highest] on to `inner`.
// spdlog's sinks filter by a lowest level only, and splitting information
// (stdout) from problems (stderr) needs the highest too.
class LevelBandSink final : public spdlog::sinks::sink {
 public:
  LevelBandSink(spdlog::sink_ptr inner, level::level_enum lowest, level::level_enum highest)
      : inner_(std::move(inner)), lowest_(lowest), highest_(highest) {}

  void log(const spdlog::details::log_msg& message) override {
    if (message.level >= lowest_ && message.level <= highest_) inner_->log(message);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  spdlog::sink_ptr inner_;
  level::level_enum lowest_;
  level::level_enum highest_;
};

struct ConsoleSink {
  spdlog::sink_ptr sink;
  FILE* stream;
};

spdlog::sink_ptr console_sink(FILE* stream, bool colour) {
  if (stream == stdout) {
    if (colour) return std::make_shared<spdlog::sinks::stdout_color_sink_mt>();
    return std::make_shared<spdlog::sinks::stdout_sink_mt>();
  }
  if (colour) return std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  return std::make_shared<spdlog::sinks::stderr_sink_mt>();
}

}  // namespace

std::string log_pattern(std::string_view source) {
  // '%' would start a pattern flag; sources are names and numbers.
  std::string escaped;
  for (const char c : source) {
    if (c == '%') escaped += '%';
    escaped += c;
  }
  return fmt::format("[%Y-%m-%d %H:%M:%S.%e] [{}] [%^%l%$] %v", escaped);
}

std::optional<level::level_enum> parse_log_level(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "warn") return level::warn;
  for (int value = level::trace; value <= level::off; ++value) {
    const auto candidate = static_cast<level::level_enum>(value);
    const spdlog::string_view_t name = level::to_string_view(candidate);
    if (lower == std::string_view(name.data(), name.size())) return candidate;
  }
  return std::nullopt;
}

StatusOr<level::level_enum> log_level_from_environment() {
  const char* value = std::getenv("DSLAUNCH_LOG_LEVEL");
  if (value == nullptr || *value == '\0') return level::info;
  if (const auto parsed = parse_log_level(value)) return *parsed;
  return invalid_argument(fmt::format(
      "DSLAUNCH_LOG_LEVEL is '{}'; it takes trace, debug, info, warning, error, critical or off",
      value));
}

Status install_logging(const LogSetup& setup) {
  const std::vector<ConsoleSink> consoles = {
      {std::make_shared<LevelBandSink>(console_sink(stdout, setup.colour), level::trace,
                                       level::info),
       stdout},
      {std::make_shared<LevelBandSink>(console_sink(stderr, setup.colour), level::warn,
                                       level::critical),
       stderr}};
  const std::string pattern = log_pattern(setup.source);
  std::vector<spdlog::sink_ptr> sinks;
  for (const ConsoleSink& console : consoles) {
    const bool terminal = isatty(fileno(console.stream)) != 0;
    console.sink->set_pattern(setup.clear_terminal_line && terminal ? "\r\x1b[K" + pattern
                                                                    : pattern);
    sinks.push_back(console.sink);
  }
  if (!setup.file.empty()) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(setup.file));
    } catch (const spdlog::spdlog_ex& error) {
      return Status(StatusCode::kIoError,
                    fmt::format("cannot append to the log '{}': {}", setup.file, error.what()));
    }
    sinks.back()->set_pattern(pattern);
  }
  auto logger = std::make_shared<spdlog::logger>("", sinks.begin(), sinks.end());
  logger->set_level(setup.level);
  // Each line reaches its file at once: a rank may die on the next one.
  logger->flush_on(level::trace);
  spdlog::set_default_logger(std::move(logger));
  return {};
}

}  // namespace dslaunch::core
