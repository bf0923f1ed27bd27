#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

namespace dslaunch::core {

// A set of element ranges [begin, end) kept sorted and disjoint, ranges that
// touch or overlap merged: what a step has written of a buffer so far.
class RangeSet {
 public:
  void clear() { ranges_.clear(); }
  bool empty() const { return ranges_.empty(); }
  const std::vector<std::pair<int64_t, int64_t>>& ranges() const { return ranges_; }

  void add(int64_t begin, int64_t end) {
    if (begin >= end) return;
    auto at = std::lower_bound(ranges_.begin(), ranges_.end(), std::make_pair(begin, end));
    at = ranges_.insert(at, {begin, end});
    if (at != ranges_.begin() && std::prev(at)->second >= at->first) {
      std::prev(at)->second = std::max(std::prev(at)->second, at->second);
      at = std::prev(ranges_.erase(at));
    }
    while (std::next(at) != ranges_.end() && std::next(at)->first <= at->second) {
      at->second = std::max(at->second, std::next(at)->second);
      ranges_.erase(std::next(at));
    }
  }

  // Whether every element of [begin, end) is in the set.
  bool covers(int64_t begin, int64_t end) const {
    if (begin >= end) return true;
    auto after = std::upper_bound(ranges_.begin(), ranges_.end(), begin,
                                  [](int64_t value, const auto& range) { return value < range.first; });
    if (after == ranges_.begin()) return false;
    return std::prev(after)->second >= end;
  }

 private:
  std::vector<std::pair<int64_t, int64_t>> ranges_;
};

}  // namespace dslaunch::core
