#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace dslaunch::kernels {

// The bytes a backend's allocate() has handed out and not taken back, and
// the most at once: what a rank's device memory holds, as its backend
// counts it (a GPU's driver and libraries hold more besides). Safe to use
// from several threads: a buffer may be freed on another thread than the
// backend's.
class AllocationTally {
 public:
  void add(const void* data, int64_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    sizes_[data] = bytes;
    current_ += bytes;
    peak_ = std::max(peak_, current_);
  }
  // Takes what add() counted for `data` back; nothing for another pointer.
  void remove(const void* data) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = sizes_.find(data);
    if (it == sizes_.end()) return;
    current_ -= it->second;
    sizes_.erase(it);
  }
  // Memory held outside allocate() (a SparseMemory's pages): +bytes when
  // they come, -bytes when they go.
  void adjust(int64_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    current_ += bytes;
    peak_ = std::max(peak_, current_);
  }
  int64_t peak() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const void*, int64_t> sizes_;
  int64_t current_ = 0;
  int64_t peak_ = 0;
};

}  // namespace dslaunch::kernels
