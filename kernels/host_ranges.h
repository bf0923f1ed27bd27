#pragma once

#include <cstdint>
#include <iterator>
#include <map>

namespace dslaunch::kernels {

// Disjoint ranges of host addresses, as a backend keeps the host memory it
// has page-locked (Backend::pin_host_memory): which a copy touches.
class HostRanges {
 public:
  // Adds [host, host + bytes); false (nothing added) where it is empty or
  // overlaps a range held.
  bool add(const void* host, int64_t bytes) {
    const char* begin = static_cast<const char*>(host);
    if (bytes <= 0 || touches(begin, bytes)) return false;
    ranges_.emplace(begin, begin + bytes);
    bytes_ += bytes;
    return true;
  }
  // Removes the range that starts at `host`; false where none does.
  bool remove(const void* host) {
    auto range = ranges_.find(static_cast<const char*>(host));
    if (range == ranges_.end()) return false;
    bytes_ -= range->second - range->first;
    ranges_.erase(range);
    return true;
  }
  // Whether [host, host + bytes) shares a byte with a range held.
  bool touches(const void* host, int64_t bytes) const {
    if (bytes <= 0) return false;
    const char* begin = static_cast<const char*>(host);
    // The last range that starts before the end is the only one that can
    // reach back into [begin, end): the ranges are disjoint and sorted.
    auto after = ranges_.lower_bound(begin + bytes);
    if (after == ranges_.begin()) return false;
    return std::prev(after)->second > begin;
  }
  int64_t size() const { return static_cast<int64_t>(ranges_.size()); }
  int64_t bytes() const { return bytes_; }  // of every range held

 private:
  std::map<const char*, const char*> ranges_;  // begin to end
  int64_t bytes_ = 0;
};

}  // namespace dslaunch::kernels
