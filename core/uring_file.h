#pragma once

#include <cstdint>
#include <memory>

#include "core/file_system.h"

namespace dslaunch::core {

// How a large file is written (FileSystem::create_large_file).
struct LargeFileOptions {
  int64_t block_bytes = int64_t{8} << 20;  // one write; a multiple of 4096
  int queue_depth = 4;                     // writes in flight
};

// A WritableFile for big sequential files (checkpoint shards, offloaded
// state): the data is copied into `queue_depth` aligned buffers of
// `block_bytes` and each full buffer is written through io_uring while the
// caller fills the next, so hashing and copying overlap the disk. The file is
// opened O_DIRECT where its file system allows it (the page cache is
// neither filled nor flushed twice), buffered where not (tmpfs); without
// io_uring (an old kernel, a seccomp filter) the blocks are written with
// pwrite. sync() writes the last partial block (padded to 4096 bytes under
// O_DIRECT, the file then truncated to its size), waits for every write and
// fsyncs. A failed write is reported by the next write_some() or sync() and
// sticks; errors are errno values, as WritableFile's. `fd`, a new empty file
// open for writing, is owned from now on.
std::unique_ptr<WritableFile> make_uring_writable_file(int fd, const LargeFileOptions& options);

// What a file of make_uring_writable_file ended up using, for benchmarks
// and tests (all false for any other file).
struct LargeFileMode {
  bool direct = false;    // O_DIRECT
  bool io_uring = false;  // asynchronous writes
};
LargeFileMode large_file_mode(const WritableFile& file);

}  // namespace dslaunch::core
