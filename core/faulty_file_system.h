#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/file_system.h"

// For tests: a FileSystem that passes every call to a real one, except the
// calls it was told to break, and that keeps track of what a power cut
// would leave on the disk.
namespace dslaunch::core {

// The kinds of call a fault can be aimed at.
enum class FileCall {
  kCreate,      // FileSystem::create_file
  kWrite,       // WritableFile::write_some
  kSync,        // WritableFile::sync
  kClose,       // WritableFile::close
  kRename,      // FileSystem::rename
  kSyncFolder,  // FileSystem::sync_folder
  kRemove,      // FileSystem::remove
  kMakeFolder,  // FileSystem::make_folder
};

// Calls are counted per kind from 1, over the object's life. Faults apply to
// the nth call of a kind, counted from the FaultyFileSystem's creation; a
// broken call changes nothing on the disk.
//
// The power-cut model, the worst POSIX allows and nothing more: a file's
// bytes survive once it is synced (those synced last; a file never synced
// comes back empty); a creation, rename or removal survives once its folder
// is synced. It covers only the files this object touched (files already
// there count as synced) and treats folders as durable once made. Tests on
// one thread set it up; the calls themselves may come from any thread.
class FaultyFileSystem final : public FileSystem {
 public:
  // `base` does the calls that are not broken; it must outlive this object,
  // which must outlive the files it creates.
  explicit FaultyFileSystem(FileSystem& base = default_file_system()) : base_(base) {}

  // The nth call of `call` fails with `error_number` (ENOSPC, EIO, ...).
  void fail(FileCall call, int nth, int error_number);
  // The nth write writes only half of its bytes (at least one) and succeeds.
  void short_write(int nth);
  // Just before the nth create_file, a symbolic link to `target` appears at
  // its path, as if planted by someone racing the writer.
  void plant_link(int nth, const std::string& target);
  // The process dies just before the nth call of `call`: that call and every
  // later one fail with EIO and change nothing, as if nothing ran after it.
  void crash_before(FileCall call, int nth);

  bool crashed() const;
  // How many calls of `call` were made (broken ones included).
  int calls(FileCall call) const;
  // Puts the files this object touched into the state the disk would be in
  // after a power cut now, under the model above: each one holds its last
  // synced bytes if its name was durable, and is gone otherwise. The process
  // that used this object is gone too: every later call fails with EIO.
  void power_cut();

  int create_file(const std::string& path, mode_t mode,
                  std::unique_ptr<WritableFile>& file) override;
  int rename(const std::string& from, const std::string& to) override;
  int sync_folder(const std::string& dir) override;
  int remove(const std::string& path) override;
  int make_folder(const std::string& path, mode_t mode) override;

 private:
  class File;
  friend class File;

  // What happens to one call, decided as it is counted.
  struct Verdict {
    int error_number = 0;  // non-zero: fail with it
    bool short_write = false;
    std::string link_target;  // non-empty: plant a link to it first
  };
  struct Fault {
    FileCall call;
    int nth;
    Verdict verdict;
    bool crash;
  };
  // What the object knows of one file's contents.
  struct Contents {
    std::string written;  // everything written through this object
    std::string synced;   // as of the last sync
    mode_t mode = 0600;
  };

  Verdict count(FileCall call);
  // Records what is at `path` before this object first changes it.
  void track(const std::string& path);
  void write_back(const std::string& path, const Contents& contents);

  FileSystem& base_;
  mutable std::mutex mutex_;
  std::vector<Fault> faults_;
  std::map<FileCall, int> calls_;
  bool crashed_ = false;
  // Every file this object knows of, by id; ids stand for inodes.
  std::vector<Contents> files_;
  // Path -> the id it names now, and after a power cut (nullopt: nothing),
  // for every path touched.
  std::map<std::string, std::optional<size_t>> live_;
  std::map<std::string, std::optional<size_t>> durable_;
};

}  // namespace dslaunch::core
