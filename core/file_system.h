#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>

// The file interface (LevelDB's Env, for writing): every file and folder
// that checkpoints and job directories create goes through a FileSystem, so
// that tests can make any call fail (a full disk, an I/O error, a short
// write) or the machine lose power before data is synced
// (FaultyFileSystem). Reading stays plain POSIX.
//
// Every call returns 0 on success or the errno value it failed with; the
// caller names the file in its message (it knows what the file is for).
namespace dslaunch::core {

// A file being written, from FileSystem::create_file. Not thread-safe: one
// thread writes it. Destroying it without close() closes it, ignoring errors.
class WritableFile {
 public:
  virtual ~WritableFile() = default;

  // Writes a prefix of `data` (at least one byte when `data` is not empty)
  // at the end of the file and sets `written` to its length; a short write
  // is not an error. EINTR is retried.
  [[nodiscard]] virtual int write_some(std::string_view data, size_t& written) = 0;
  // fsync: what was written is on the disk when this returns 0.
  [[nodiscard]] virtual int sync() = 0;
  // Closes the file; a late write error (NFS reports them here) is returned.
  // No call may follow, whatever it returns.
  [[nodiscard]] virtual int close() = 0;

  // Writes the whole of `data`, going on after short writes; on failure
  // some prefix of `data` may have been written.
  [[nodiscard]] int write_all(std::string_view data);
};

// The calls that change files and folders. Implementations are thread-safe.
class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Creates the new file `path` for writing, with exactly `mode` whatever
  // the umask. It must not exist: EEXIST when anything is there, including
  // a symbolic link, which is never followed (O_CREAT | O_EXCL |
  // O_NOFOLLOW), so a link planted at a temporary name cannot redirect the
  // write. The descriptor is not inherited by child processes. On success
  // `file` owns the open file.
  [[nodiscard]] virtual int create_file(const std::string& path, mode_t mode,
                                        std::unique_ptr<WritableFile>& file) = 0;
  // create_file for a big file written front to back once (a checkpoint
  // shard): PosixFileSystem writes it in large aligned blocks through
  // io_uring (core/uring_file.h). By default, create_file.
  [[nodiscard]] virtual int create_large_file(const std::string& path, mode_t mode,
                                              std::unique_ptr<WritableFile>& file) {
    return create_file(path, mode, file);
  }
  // rename(2): atomically replaces `to`; durable once `to`'s folder is synced.
  [[nodiscard]] virtual int rename(const std::string& from, const std::string& to) = 0;
  // fsync of the folder `dir`: the creations, renames and removals in it
  // survive a power cut once this returns 0.
  [[nodiscard]] virtual int sync_folder(const std::string& dir) = 0;
  // unlink(2) of a file (or a link, not what it points to).
  [[nodiscard]] virtual int remove(const std::string& path) = 0;
  // Creates the folder `path` with exactly `mode` whatever the umask: 0 when
  // it made it, EEXIST when a folder is already there (left as it is),
  // ENOTDIR when something else is.
  [[nodiscard]] virtual int make_folder(const std::string& path, mode_t mode) = 0;
};

// The process-wide PosixFileSystem: what callers that inject no faults use.
FileSystem& default_file_system();

// mkdir -p: creates every missing folder of `path` with `mode`, leaving the
// existing ones as they are. On failure returns false with `error` naming
// the folder that could not be made and the reason.
bool create_folders(FileSystem& fs, const std::string& path, mode_t mode, std::string& error);

// The folder that holds `path` ("." for a bare name), for sync_folder.
std::string parent_folder(const std::string& path);

}  // namespace dslaunch::core
