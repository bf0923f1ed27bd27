#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <spdlog/common.h>

#include "core/status.h"

namespace dslaunch::core {

// How a binary's log lines look and where they go. Every line is
//   [2026-11-26 07:01:02.345] [rank 3] [info] step 50/300 | loss 2.41 | ...
// (the time, who wrote it and the level), as DeepSpeed's and torchrun's logs
// carry a timestamp, a level and the rank.
struct LogSetup {
  std::string source;  // "dslaunch", "rank 3"
  spdlog::level::level_enum level = spdlog::level::info;
  // Colour the level on a terminal.
  bool colour = false;
  // On a terminal, each line first clears the line the cursor is on: the
  // controller's progress line, redrawn below the message at its next update.
  bool clear_terminal_line = false;
  // Every line is also appended to this file (empty: none).
  std::string file;
};

// The spdlog pattern of a line written by `source`.
std::string log_pattern(std::string_view source);

// DSLAUNCH_LOG_LEVEL's values: trace, debug, info, warning (or warn), error,
// critical, off; any case. nullopt for anything else.
std::optional<spdlog::level::level_enum> parse_log_level(std::string_view text);

// The level DSLAUNCH_LOG_LEVEL names (info when unset); a value that names
// none is an error naming the variable and the values it takes.
StatusOr<spdlog::level::level_enum> log_level_from_environment();

// Makes `setup` spdlog's default logger (spdlog::info(...) and friends write
// through it from then on): information to stdout, warnings and errors to
// stderr (so a rank's stderr.log holds what went wrong, whose last lines a
// failure report quotes). Fails, leaving the logger as it was, when the file
// cannot be opened for appending.
Status install_logging(const LogSetup& setup);

}  // namespace dslaunch::core
