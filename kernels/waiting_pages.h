#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dslaunch::kernels {

// A sparse memory's pages released in stream order (SparseMemory::unmap):
// each waits, under the ticket of its release, until the stream's work
// queued before that release is done, and only then gives its memory back.
// A page committed again while it waits keeps its memory and leaves the
// queue, so memory that a layer releases and the next commits is not given
// back and mapped again.
class WaitingPages {
 public:
  explicit WaitingPages(int64_t pages) : ticket_(static_cast<size_t>(pages), 0) {}

  // Pages [first, first + count) wait under a new ticket, returned.
  uint64_t wait(int64_t first, int64_t count) {
    const uint64_t ticket = next_++;
    for (int64_t p = first; p < first + count; ++p) ticket_[p] = ticket;
    return ticket;
  }
  bool waiting(int64_t page) const { return ticket_[page] != 0; }
  // Page `page` is committed again: it no longer waits (it holds its memory).
  void keep(int64_t page) { ticket_[page] = 0; }
  // The stream has done the work before the release that made `ticket`
  // for pages [first, first + count): calls give_back(first, count) for
  // each run of them still waiting under it, which then no longer wait.
  template <typename GiveBack>
  void done(uint64_t ticket, int64_t first, int64_t count, const GiveBack& give_back) {
    int64_t start = -1;
    for (int64_t p = first; p <= first + count; ++p) {
      if (p < first + count && ticket_[p] == ticket) {
        ticket_[p] = 0;
        if (start < 0) start = p;
      } else if (start >= 0) {
        give_back(start, p - start);
        start = -1;
      }
    }
  }

 private:
  std::vector<uint64_t> ticket_;  // 0: not waiting
  uint64_t next_ = 1;
};

}  // namespace dslaunch::kernels
