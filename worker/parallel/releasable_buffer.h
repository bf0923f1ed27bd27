#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace dslaunch::worker {

// A full-size float buffer whose ranges can be handed back to the OS while
// the rest stays: under ZeRO stage 2 the gradients a backward pass
// accumulates into (zero() once a range has been reduce-scattered), under
// stage 3 also the gathered parameters (zero() once a block has been used).
//
// The floats live in a private anonymous mapping made with MAP_NORESERVE, so
// only pages written since they were last released take memory. zero() gives
// whole pages back with madvise(MADV_DONTNEED) and overwrites with zeros the
// floats it covers on the pages at its edges; an anonymous page that was given
// back reads as zeros when next touched. So after zero() the range holds the
// zeros the next backward's += accumulation needs, without a memset of the
// buffer.
//
// Threads: zero() may run on one thread while others write floats outside
// the range it is given; nothing else is synchronised.
class ReleasableBuffer {
 public:
  // n floats, all zero. On failure (mmap) data() is nullptr and status()
  // says why (out of memory: kResourceExhausted). n == 0 maps nothing.
  explicit ReleasableBuffer(int64_t n);
  ~ReleasableBuffer();

  ReleasableBuffer(const ReleasableBuffer&) = delete;
  ReleasableBuffer& operator=(const ReleasableBuffer&) = delete;

  float* data() { return data_; }
  int64_t size() const { return n_; }
  // Floats mapped: size() rounded up to whole pages. The floats past size()
  // are never written, so they are always zero.
  int64_t capacity() const { return capacity_; }
  const core::Status& status() const { return status_; }
  // Index i rounded up to the next page boundary (at most capacity()).
  int64_t page_end(int64_t i) const {
    return std::min(capacity_, (i + page_floats_ - 1) / page_floats_ * page_floats_);
  }

  // Floats [begin, end), end <= capacity(), read as zero afterwards. Measures
  // the resident size first (just before a release is when the buffer is
  // fullest), so peak_resident_bytes() is the largest resident size seen.
  void zero(int64_t begin, int64_t end);

  // Bytes of the mapping in memory now (mincore).
  int64_t resident_bytes() const;
  // The largest resident_bytes() measured by zero() so far; thread-safe.
  int64_t peak_resident_bytes() const { return peak_.load(); }

 private:
  float* data_ = nullptr;
  int64_t n_ = 0;
  int64_t capacity_ = 0;
  int64_t page_floats_ = 1;
  core::Status status_;
  std::atomic<int64_t> peak_{0};
};

}  // namespace dslaunch::worker
