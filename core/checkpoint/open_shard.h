#pragma once

// Internal to core/checkpoint: a shard file opened and its header checked,
// shared by the writer's format code and the resharding reader.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint/shard_file.h"

namespace dslaunch::core::shard_internal {

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();
  int get() const { return fd_; }

 private:
  int fd_;
};

struct OpenShard {
  std::unique_ptr<FileDescriptor> fd;
  ShardHeader header;
  std::vector<int64_t> array_offsets;  // bytes from the start of the file, one per header.arrays
};

// Opens `path` and validates everything read_shard_header promises; false
// with `error` naming the file otherwise.
bool open_shard(const std::string& path, OpenShard& shard, std::string& error);

// "" when all `bytes` were read at `offset`, else why not.
std::string read_exactly(int fd, char* out, int64_t bytes, int64_t offset);

}  // namespace dslaunch::core::shard_internal
