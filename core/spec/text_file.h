#pragma once

#include <optional>
#include <string>

namespace dslaunch::spec {

// The contents of the job's input files (spec, DeepSpeed config, hostfile).
// Only regular files up to kMaxTextFileBytes are read: a FIFO or a device
// such as /dev/zero would otherwise block or exhaust memory. On failure
// returns std::nullopt and sets `error` to "cannot read <what> '<path>': why".
inline constexpr size_t kMaxTextFileBytes = 256u << 20;
std::optional<std::string> read_text_file(const std::string& path, const std::string& what,
                                          std::string& error);

}  // namespace dslaunch::spec
