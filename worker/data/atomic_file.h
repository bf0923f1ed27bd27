#pragma once

#include <string>
#include <string_view>

namespace dslaunch::worker::data {

// Writes `content` to a temporary file with a unique name beside `path`,
// syncs it and renames it over `path`: readers see the old file or the whole
// new one, never a part, and several processes may replace the same path at
// once (the last rename wins). The file gets mode 0644. On failure returns
// false, sets `error` (naming the file and the reason) and leaves `path` and
// no temporary file behind. Thread-safe.
bool write_file_atomically(const std::string& path, std::string_view content, std::string& error);

}  // namespace dslaunch::worker::data
