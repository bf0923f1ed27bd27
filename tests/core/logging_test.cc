#include "core/logging.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

namespace fs = std::filesystem;
using dslaunch::core::install_logging;
using dslaunch::core::log_level_from_environment;
using dslaunch::core::log_pattern;
using dslaunch::core::LogSetup;
using dslaunch::core::parse_log_level;

namespace {

fs::path temp_dir() {
  const char* root = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(root != nullptr ? root : "/tmp") / "logging_test";
  fs::create_directories(dir);
  return dir;
}

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Points this process's stdout and stderr at files while it lives.
class CapturedStreams {
 public:
  explicit CapturedStreams(const fs::path& dir)
      : out_path_(dir / "stdout.txt"), err_path_(dir / "stderr.txt") {
    std::fflush(stdout);
    std::fflush(stderr);
    saved_out_ = dup(STDOUT_FILENO);
    saved_err_ = dup(STDERR_FILENO);
    redirect(out_path_, STDOUT_FILENO);
    redirect(err_path_, STDERR_FILENO);
  }
  ~CapturedStreams() { restore(); }

  void restore() {
    if (saved_out_ < 0) return;
    std::fflush(stdout);
    std::fflush(stderr);
    dup2(saved_out_, STDOUT_FILENO);
    dup2(saved_err_, STDERR_FILENO);
    close(saved_out_);
    close(saved_err_);
    saved_out_ = saved_err_ = -1;
  }
  std::vector<std::string> out() const { return lines_of(out_path_); }
  std::vector<std::string> err() const { return lines_of(err_path_); }

 private:
  static void redirect(const fs::path& path, int stream) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    dup2(fd, stream);
    close(fd);
  }
  fs::path out_path_, err_path_;
  int saved_out_ = -1, saved_err_ = -1;
};

// "[2026-11-26 07:01:02.345] [rank 3] [info] message"
const std::regex kLine(R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[([^\]]+)\] \[(\w+)\] (.*))");

struct Parsed {
  std::string source, level, message;
};

Parsed parse(const std::string& line) {
  std::smatch match;
  INFO(line);
  REQUIRE(std::regex_match(line, match, kLine));
  return {match[1], match[2], match[3]};
}

}  // namespace

TEST_CASE("a line carries the time, the source and the level before the message") {
  CHECK(log_pattern("rank 3") == "[%Y-%m-%d %H:%M:%S.%e] [rank 3] [%^%l%$] %v");
  // A '%' in the source is text, not a pattern flag.
  CHECK(log_pattern("50%") == "[%Y-%m-%d %H:%M:%S.%e] [50%%] [%^%l%$] %v");
}

TEST_CASE("information goes to stdout, problems to stderr, everything to the file") {
  const fs::path dir = temp_dir() / "split";
  fs::create_directories(dir);
  const fs::path file = dir / "controller.log";
  fs::remove(file);
  {
    std::ofstream(file) << "a line from an earlier run\n";
  }
  CapturedStreams streams(dir);
  LogSetup setup;
  setup.source = "rank 3";
  setup.file = file.string();
  REQUIRE(install_logging(setup).ok());
  spdlog::debug("not shown at level info");
  spdlog::info("step {}/{} | loss {:.3f}", 50, 300, 2.4142);
  spdlog::warn("a warning");
  spdlog::error("an error");
  streams.restore();

  const auto out = streams.out();
  REQUIRE(out.size() == 1);
  const Parsed info = parse(out[0]);
  CHECK(info.source == "rank 3");
  CHECK(info.level == "info");
  CHECK(info.message == "step 50/300 | loss 2.414");

  const auto err = streams.err();
  REQUIRE(err.size() == 2);
  CHECK(parse(err[0]).level == "warning");
  CHECK(parse(err[0]).message == "a warning");
  CHECK(parse(err[1]).level == "error");
  CHECK(parse(err[1]).message == "an error");

  // The file is appended to, never truncated, and flushed line by line.
  const auto logged = lines_of(file);
  REQUIRE(logged.size() == 4);
  CHECK(logged[0] == "a line from an earlier run");
  CHECK(parse(logged[1]).message == "step 50/300 | loss 2.414");
  CHECK(parse(logged[2]).message == "a warning");
  CHECK(parse(logged[3]).message == "an error");
}

TEST_CASE("the level hides what is below it") {
  const fs::path dir = temp_dir() / "level";
  fs::create_directories(dir);
  CapturedStreams streams(dir);
  LogSetup setup;
  setup.source = "dslaunch";
  setup.level = spdlog::level::warn;
  REQUIRE(install_logging(setup).ok());
  spdlog::info("hidden");
  spdlog::warn("shown");
  spdlog::debug("hidden too");
  spdlog::critical("shown too");
  streams.restore();
  CHECK(streams.out().empty());
  const auto err = streams.err();
  REQUIRE(err.size() == 2);
  CHECK(parse(err[0]).source == "dslaunch");
  CHECK(parse(err[0]).message == "shown");
  CHECK(parse(err[1]).level == "critical");
}

TEST_CASE("a log file that cannot be opened is an error naming it, and the logger stays") {
  const fs::path dir = temp_dir() / "unwritable";
  fs::create_directories(dir);
  LogSetup first;
  first.source = "kept";
  REQUIRE(install_logging(first).ok());
  const auto kept = spdlog::default_logger();
  LogSetup setup;
  setup.source = "rank 0";
  // A directory in the way of the file.
  setup.file = dir.string();
  const auto status = install_logging(setup);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::StartsWith("cannot append to the log '" + dir.string() + "'"));
  CHECK(spdlog::default_logger() == kept);
}

TEST_CASE("DSLAUNCH_LOG_LEVEL names a level in any case") {
  CHECK(parse_log_level("debug") == spdlog::level::debug);
  CHECK(parse_log_level("WARNING") == spdlog::level::warn);
  CHECK(parse_log_level("warn") == spdlog::level::warn);
  CHECK(parse_log_level("Error") == spdlog::level::err);
  CHECK(parse_log_level("off") == spdlog::level::off);
  CHECK_FALSE(parse_log_level("verbose").has_value());
  CHECK_FALSE(parse_log_level("").has_value());

  unsetenv("DSLAUNCH_LOG_LEVEL");
  CHECK(log_level_from_environment().value() == spdlog::level::info);
  setenv("DSLAUNCH_LOG_LEVEL", "trace", 1);
  CHECK(log_level_from_environment().value() == spdlog::level::trace);
  setenv("DSLAUNCH_LOG_LEVEL", "loud", 1);
  const auto refused = log_level_from_environment();
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message() ==
        "DSLAUNCH_LOG_LEVEL is 'loud'; it takes trace, debug, info, warning, error, critical or "
        "off");
  unsetenv("DSLAUNCH_LOG_LEVEL");
}
