#pragma once

#include <sys/types.h>

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

// Writes `content` to `<dir>/<name>.tmp` with exactly `mode` (whatever the
// umask), syncs it, renames it over `<dir>/<name>` and syncs the folder, so
// the new file also survives a power cut. For files one process writes at a
// time (the temporary name is fixed): a stale temporary left by a crash is
// removed first, and O_EXCL then follows no link. On failure returns false,
// sets `error` (naming the file and the reason) and leaves the old file as
// it was and no temporary file.
bool replace_file_durably(const std::string& dir, std::string_view name, std::string_view content,
                          mode_t mode, std::string& error);

// fsync of the folder `dir`: makes the creations and renames in it durable.
bool sync_folder(const std::string& dir, std::string& error);

}  // namespace dslaunch::worker::data
