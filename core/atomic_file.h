#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>

#include "core/file_system.h"

// Files replaced whole and durably: every write below goes to a temporary
// file beside the target, created new (O_EXCL | O_NOFOLLOW: a link planted
// at its name is never written through), synced, renamed over the target,
// and then the folder is synced, so the new file survives a power cut.
// Readers see the old file or the whole new one, never a part. On failure
// each returns false, sets `error` (naming the file and the reason) and
// leaves the old file as it was and no temporary file. All file calls go
// through `fs` (core::default_file_system() unless a test injects faults).
namespace dslaunch::core {

// Several processes may replace the same `path` at once (the last rename
// wins): the temporary file's name is unique. The file gets exactly `mode`.
// Thread-safe.
bool write_file_atomically(const std::string& path, std::string_view content, std::string& error,
                           mode_t mode = 0644, core::FileSystem& fs = core::default_file_system());

// The same for content produced a piece at a time, so that it never has to
// be in memory whole: `produce` writes it to the temporary file and returns
// 0, or the errno of a failed write, or -1 after setting `error` to a
// failure of its own (reading what it writes); the temporary file is then
// removed.
using ContentProducer = std::function<int(core::WritableFile& file, std::string& error)>;
bool write_file_atomically(const std::string& path, const ContentProducer& produce,
                           std::string& error, mode_t mode = 0644,
                           core::FileSystem& fs = core::default_file_system());

// Writes `<dir>/<name>` through the fixed temporary name `<dir>/<name>.tmp`,
// with exactly `mode`. For files one process writes at a time: a stale
// temporary left by a crash is removed first.
bool replace_file_durably(const std::string& dir, std::string_view name, std::string_view content,
                          mode_t mode, std::string& error,
                          core::FileSystem& fs = core::default_file_system());

// fsync of the folder `dir`: makes the creations and renames in it durable.
bool sync_folder(const std::string& dir, std::string& error,
                 core::FileSystem& fs = core::default_file_system());

}  // namespace dslaunch::core
