#pragma once

#include <algorithm>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/allocation_tally.h"

namespace dslaunch::kernels {

// A range of a backend's addresses of which only the committed parts hold
// memory: ZeRO stage 3's parameter workspace on a GPU, where the model reads
// each tensor at its place in the whole layout but only the blocks gathered
// for use take memory. Memory comes and goes a page at a time (a GPU's
// granularity, 2 MiB, through CUDA's virtual memory management; the host's
// page elsewhere), and a page holds memory while any committed range
// touches it, so ranges that share an edge page may be committed and
// released in any order. Reading or writing outside what is committed is an
// error the backend may catch (a GPU's fault, the emulator's guard).
//
// Release is stream-ordered, as cudaFreeAsync is: a page no committed range
// touches gives its memory back once the work queued so far on the
// backend's current stream is done, without the host waiting for it; work
// of other streams on the range must be done by then, or ordered before
// that point (the stream waited for its event). Committed again before
// then, a page keeps its memory. resident_bytes() counts what is
// committed; a page waiting for its stream still holds its memory, which a
// commit short of room waits for and takes back.
//
// What a page holds when it is committed again is undefined: callers
// overwrite what they commit. Not thread-safe.
class SparseMemory {
 public:
  // Subclasses give back what is mapped and the reservation.
  virtual ~SparseMemory() { tally_.adjust(-mapped_pages_ * page_); }
  SparseMemory(const SparseMemory&) = delete;
  SparseMemory& operator=(const SparseMemory&) = delete;

  void* data() const { return base_; }
  int64_t bytes() const { return bytes_; }
  int64_t page_bytes() const { return page_; }
  // Bytes held now, and the most held at once.
  int64_t resident_bytes() const { return mapped_pages_ * page_; }
  int64_t peak_resident_bytes() const { return peak_pages_ * page_; }

  // Bytes [begin, end) hold memory until the matching release(); throws
  // std::bad_alloc (committing nothing) when the backend has no room. An
  // empty range commits nothing.
  void commit(int64_t begin, int64_t end) {
    check(begin, end);
    if (begin == end) return;
    const int64_t first = begin / page_;
    const int64_t last = end_page(end);
    for (int64_t p = first; p < last; ++p) ++users_[p];
    try {
      for_runs(
          first, last, [this](int64_t p) { return users_[p] > 0 && !mapped_[p]; },
          [this](int64_t run, int64_t count) {
            map(run, count);
            set_mapped(run, count, true);
          });
    } catch (...) {  // no room (std::bad_alloc), or the driver refused
      for (int64_t p = first; p < last; ++p) --users_[p];
      unmap_unused(first, last);
      throw;
    }
  }
  // Undoes one commit() of bytes [begin, end): pages no other committed
  // range touches give their memory back.
  void release(int64_t begin, int64_t end) {
    check(begin, end);
    if (begin == end) return;
    const int64_t first = begin / page_;
    const int64_t last = end_page(end);
    for (int64_t p = first; p < last; ++p) {
      if (users_[p] == 0) throw std::logic_error("SparseMemory::release of a range not committed");
    }
    for (int64_t p = first; p < last; ++p) --users_[p];
    unmap_unused(first, last);
  }
  // Whether every page of bytes [begin, end) holds memory.
  bool committed(int64_t begin, int64_t end) const {
    if (begin < 0 || end > bytes_ || begin > end) return false;
    for (int64_t p = begin / page_; p < end_page(end); ++p) {
      if (users_[p] == 0) return false;
    }
    return true;
  }

 protected:
  // `bytes` at `base`, a multiple of page_bytes (the caller reserved them
  // rounded up); the tally counts what is mapped.
  SparseMemory(void* base, int64_t bytes, int64_t page_bytes, AllocationTally& tally)
      : base_(base),
        bytes_(bytes),
        page_(page_bytes),
        users_(static_cast<size_t>((bytes + page_bytes - 1) / page_bytes), 0),
        mapped_(users_.size(), false),
        tally_(tally) {}

  // Back pages [first, first + count) with memory (throw std::bad_alloc when
  // there is none, mapping none), or give it back once the current
  // stream's work so far is done (a page mapped again before then keeps
  // its memory: waiting_pages.h).
  virtual void map(int64_t first, int64_t count) = 0;
  virtual void unmap(int64_t first, int64_t count) = 0;
  // Calls fn(first, count) for each run of pages holding memory.
  template <typename Fn>
  void for_mapped_runs(const Fn& fn) const {
    for_runs(
        0, static_cast<int64_t>(mapped_.size()), [this](int64_t p) { return mapped_[p]; }, fn);
  }

 private:
  int64_t end_page(int64_t end) const { return (end + page_ - 1) / page_; }
  void check(int64_t begin, int64_t end) const {
    if (begin < 0 || end > bytes_ || begin > end) {
      throw std::out_of_range("SparseMemory: range outside the reservation");
    }
  }
  // Calls run(first, count) for each maximal run of pages in [first, last)
  // that `in_run` picks.
  template <typename InRun, typename Run>
  static void for_runs(int64_t first, int64_t last, const InRun& in_run, const Run& run) {
    int64_t start = -1;
    for (int64_t p = first; p <= last; ++p) {
      const bool picked = p < last && in_run(p);
      if (picked && start < 0) start = p;
      if (!picked && start >= 0) {
        run(start, p - start);
        start = -1;
      }
    }
  }
  void set_mapped(int64_t first, int64_t count, bool mapped) {
    for (int64_t p = first; p < first + count; ++p) mapped_[p] = mapped;
    mapped_pages_ += mapped ? count : -count;
    peak_pages_ = std::max(peak_pages_, mapped_pages_);
    tally_.adjust((mapped ? count : -count) * page_);
  }
  void unmap_unused(int64_t first, int64_t last) {
    for_runs(
        first, last, [this](int64_t p) { return users_[p] == 0 && mapped_[p]; },
        [this](int64_t run, int64_t count) {
          unmap(run, count);
          set_mapped(run, count, false);
        });
  }

  void* base_;
  int64_t bytes_;
  int64_t page_;
  std::vector<int32_t> users_;  // committed ranges touching each page
  std::vector<bool> mapped_;    // holding memory
  int64_t mapped_pages_ = 0;
  int64_t peak_pages_ = 0;
  AllocationTally& tally_;
};

// Commits every range [begin, end) of floats of `memory`, all or none: on a
// failure it releases those it committed and throws what commit() threw.
inline void commit_floats(SparseMemory& memory,
                          const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  constexpr int64_t kFloat = sizeof(float);
  size_t done = 0;
  try {
    for (; done < ranges.size(); ++done) {
      memory.commit(ranges[done].first * kFloat, ranges[done].second * kFloat);
    }
  } catch (...) {
    for (size_t i = 0; i < done; ++i) {
      memory.release(ranges[i].first * kFloat, ranges[i].second * kFloat);
    }
    throw;
  }
}

// Undoes commit_floats(memory, ranges).
inline void release_floats(SparseMemory& memory,
                           const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  constexpr int64_t kFloat = sizeof(float);
  for (const auto& [begin, end] : ranges) memory.release(begin * kFloat, end * kFloat);
}

}  // namespace dslaunch::kernels
