#pragma once

#include <optional>
#include <string>

namespace dslaunch::controller {

// An exclusive lock on a folder for as long as this object lives: a
// `.lock` file in it, locked with flock and holding the owner's pid. Two
// controllers must never write one job directory or one checkpoint folder
// at once (their shards, manifests and pruning would collide). The lock
// ends with the process, however it ends, and is not inherited by the
// processes it starts.
class DirectoryLock {
 public:
  // The lock on `dir` (created with its missing parents, 0700, if missing),
  // or nullopt with `error` naming the holder's pid when another process
  // has it, or the folder or file that could not be made.
  static std::optional<DirectoryLock> acquire(const std::string& dir, std::string& error);

  DirectoryLock(DirectoryLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  DirectoryLock& operator=(DirectoryLock&&) = delete;
  ~DirectoryLock();

 private:
  explicit DirectoryLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace dslaunch::controller
