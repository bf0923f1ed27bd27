#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <thread>

#include "core/checkpoint/shard_file.h"

namespace dslaunch::worker::checkpoint {

// Saves checkpoint shards without stopping training for the disk, as
// DeepSpeed's asynchronous checkpointing does: save() copies the arrays into
// host buffers this object owns and returns, and a background thread writes
// the copy with write_shard. Or, as DeepSpeed's FastPersist does, it borrows
// them: the background thread writes them from where they are, and the
// caller leaves them unchanged until release() (no copy, no second copy of
// the state in memory; training overlaps the write with its next forward
// and backward passes and waits, if at all, before changing them).
//
// At most one save is in flight. The buffers are reused from one save to the
// next (they grow to the largest shard copied and are never shrunk), so the
// copy is the only time the caller waits, unless the previous save is still
// being written: then save() first waits for it to finish.
//
// Thread safety: save() and wait() are to be called from one thread (or with
// the caller's own locking); `done` runs on the background thread.
class AsyncShardWriter {
 public:
  // Called once per save, on the background thread, with write_shard's
  // result. It must not call save() or wait() on the same writer, which
  // would wait for itself. The next save does not start until it returns.
  using Done = std::function<void(const core::WrittenShard&)>;

  // Starts the background thread.
  AsyncShardWriter();
  AsyncShardWriter(const AsyncShardWriter&) = delete;
  AsyncShardWriter& operator=(const AsyncShardWriter&) = delete;
  // Waits for a save in flight to be written (and its `done` to return), so a
  // shard is never abandoned half-written, then joins the thread.
  ~AsyncShardWriter();

  // Copies header.end - header.begin elements of each of `arrays` and
  // returns; the caller may change or free its arrays at once. When an array
  // streams (ShardArrayData::read: state swapped out of memory, which a copy
  // would bring back in whole), the shard is written before save()
  // returns, on the caller's thread, and `done` runs there too. The shard is
  // then written to `path` as write_shard(path, header, arrays) would, and
  // `done` is called with the result (write errors arrive there, never here).
  void save(const std::string& path, const core::ShardHeader& header,
            const std::vector<core::ShardArrayData>& arrays, Done done);
  // The same, with the rank-state arrays: rank_arrays[i] holds
  // header.rank_state->arrays[i].count elements of that array's dtype, and is
  // copied too before save() returns. Written as write_shard(path, header,
  // arrays, rank_arrays) would (a count mismatch arrives at `done` as its
  // error).
  // kBorrow: the arrays and rank_arrays are not copied but written where
  // they are; the caller must not change or free them until release() or
  // wait() returns.
  enum class Hold { kCopy, kBorrow };
  void save(const std::string& path, const core::ShardHeader& header,
            const std::vector<core::ShardArrayData>& arrays,
            const std::vector<const void*>& rank_arrays, Done done, Hold hold = Hold::kCopy);

  // Blocks until no save is in flight and its `done` has returned.
  void wait();
  // Blocks until no borrowed arrays are being written: wait() when the save
  // in flight borrows, else nothing.
  void release();

 private:
  // A host buffer kept between saves.
  struct Buffer {
    std::unique_ptr<char[]> data;
    size_t capacity = 0;  // bytes
    const void* hold(const void* source, size_t bytes);
  };

  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  bool in_flight_ = false;  // a save is queued or being written
  bool borrowed_ = false;   // ... from the caller's arrays
  bool stopping_ = false;
  // The save in flight; the caller's thread touches these only while
  // !in_flight_, the background thread only while in_flight_.
  std::string path_;
  core::ShardHeader header_;
  Done done_;
  std::vector<Buffer> buffers_;
  std::vector<core::ShardArrayData> arrays_;  // pointing into buffers_
  std::vector<Buffer> rank_buffers_;
  std::vector<const void*> rank_arrays_;  // pointing into rank_buffers_
  std::thread thread_;
};

}  // namespace dslaunch::worker::checkpoint
