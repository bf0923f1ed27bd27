#include "core/atomic_file.h"

#include <cerrno>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "core/errno_status.h"

namespace dslaunch::core {
namespace {

std::string join(const std::string& dir, std::string_view name) {
  return dir == "/" ? fmt::format("/{}", name) : fmt::format("{}/{}", dir, name);
}

// `path` + ".tmp." + 6 random letters and digits.
std::string unique_temporary_name(const std::string& path) {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 random{std::random_device{}()};
  std::string name = path + ".tmp.";
  for (int i = 0; i < 6; ++i) name += kAlphabet[random() % (sizeof kAlphabet - 1)];
  return name;
}

// Has `produce` write the new file `temporary`, syncs it and closes it. On
// failure removes it and sets `error`.
bool write_synced(core::FileSystem& fs, std::unique_ptr<core::WritableFile> file,
                  const std::string& temporary, const ContentProducer& produce,
                  std::string& error) {
  std::string own_error;
  int failure = produce(*file, own_error);
  if (failure == 0) failure = file->sync();
  // close() reports late write errors (NFS does).
  const int close_failure = file->close();
  if (failure == 0) failure = close_failure;
  if (failure == 0) return true;
  error = fmt::format("cannot write '{}': {}", temporary,
                      failure == -1 ? own_error : core::errno_text(failure));
  (void)fs.remove(temporary);
  return false;
}

ContentProducer whole(std::string_view content) {
  return [content](core::WritableFile& file, std::string&) { return file.write_all(content); };
}

// Renames the written `temporary` over `path` and syncs `dir`, its folder.
bool commit(core::FileSystem& fs, const std::string& temporary, const std::string& path,
            const std::string& dir, std::string& error) {
  if (const int failure = fs.rename(temporary, path)) {
    error = fmt::format("cannot rename '{}' to '{}': {}", temporary, path, core::errno_text(failure));
    (void)fs.remove(temporary);
    return false;
  }
  // Without this a power cut could lose the rename, though the data is synced.
  if (const int failure = fs.sync_folder(dir)) {
    error = fmt::format("'{}' is written but its folder '{}' cannot be synced: {}", path, dir,
                        core::errno_text(failure));
    return false;
  }
  return true;
}

}  // namespace

bool sync_folder(const std::string& dir, std::string& error, core::FileSystem& fs) {
  if (const int failure = fs.sync_folder(dir)) {
    error = fmt::format("cannot sync folder '{}': {}", dir, core::errno_text(failure));
    return false;
  }
  return true;
}

bool replace_file_durably(const std::string& dir, std::string_view name, std::string_view content,
                          mode_t mode, std::string& error, core::FileSystem& fs) {
  const std::string path = join(dir, name);
  const std::string temporary = path + ".tmp";
  if (const int failure = fs.remove(temporary); failure != 0 && failure != ENOENT) {
    error = fmt::format("cannot remove stale '{}': {}", temporary, core::errno_text(failure));
    return false;
  }
  std::unique_ptr<core::WritableFile> file;
  if (const int failure = fs.create_file(temporary, mode, file)) {
    error = fmt::format("cannot write '{}': {}", temporary, core::errno_text(failure));
    return false;
  }
  return write_synced(fs, std::move(file), temporary, whole(content), error) &&
         commit(fs, temporary, path, dir, error);
}

bool write_file_atomically(const std::string& path, std::string_view content, std::string& error,
                           mode_t mode, core::FileSystem& fs) {
  return write_file_atomically(path, whole(content), error, mode, fs);
}

bool write_file_atomically(const std::string& path, const ContentProducer& produce,
                           std::string& error, mode_t mode, core::FileSystem& fs) {
  // A unique name, so concurrent writers never share a temporary file; a
  // name that is taken (by anything, a link included) is passed over.
  constexpr int kAttempts = 100;
  std::unique_ptr<core::WritableFile> file;
  std::string temporary;
  int failure = EEXIST;
  for (int attempt = 0; attempt < kAttempts && failure == EEXIST; ++attempt) {
    temporary = unique_temporary_name(path);
    failure = fs.create_file(temporary, mode, file);
  }
  if (failure != 0) {
    error = fmt::format("cannot write '{}': cannot create a temporary file beside it: {}", path,
                        core::errno_text(failure));
    return false;
  }
  return write_synced(fs, std::move(file), temporary, produce, error) &&
         commit(fs, temporary, path, core::parent_folder(path), error);
}

}  // namespace dslaunch::core
