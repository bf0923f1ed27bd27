#include "core/layout/backward_gradient_pages.h"

#include <algorithm>
#include <vector>

#include "core/layout/range_set.h"

namespace dslaunch::core {
namespace {

constexpr int64_t kFloat = 4;

// The pages of a buffer of n floats, which take memory when a range on them
// is prepared and give it back once all their floats are reduced.
class PageReplay {
 public:
  PageReplay(int64_t n, int64_t page_bytes)
      : n_(n),
        page_floats_(page_bytes / kFloat),
        page_bytes_(page_bytes),
        held_((n + page_floats_ - 1) / page_floats_, false),
        reduced_(held_.size(), 0) {}

  void prepare(int64_t begin, int64_t end) {
    for (int64_t p = begin / page_floats_; p < end_page(end); ++p) {
      if (held_[p]) continue;
      held_[p] = true;
      ++resident_;
    }
    peak_ = std::max(peak_, resident_);
  }
  void reduced(int64_t begin, int64_t end) {
    for (int64_t p = begin / page_floats_; p < end_page(end); ++p) {
      const int64_t first = p * page_floats_;
      const int64_t last = std::min(n_, first + page_floats_);
      reduced_[p] += std::min(end, last) - std::max(begin, first);
      if (reduced_[p] < last - first) continue;
      reduced_[p] = 0;
      held_[p] = false;
      --resident_;
    }
  }
  int64_t peak_bytes() const { return peak_ * page_bytes_; }

 private:
  int64_t end_page(int64_t end) const { return (end + page_floats_ - 1) / page_floats_; }

  int64_t n_;
  int64_t page_floats_;
  int64_t page_bytes_;
  std::vector<bool> held_;
  std::vector<int64_t> reduced_;  // floats of each held page reduced
  int64_t resident_ = 0;
  int64_t peak_ = 0;
};

// Buckets from the buffer's end, each launched once complete and all after
// it are (every float from the launch frontier up), and reduced, its floats
// released, once `in_flight` more have been launched after it (or backward
// has ended). Kept as frontiers, not per bucket, so that buckets of a float
// cost no more than large ones.
class BucketReplay {
 public:
  BucketReplay(int64_t n, int64_t bucket_elements, int64_t in_flight, PageReplay& pages)
      : n_(n),
        size_(std::clamp<int64_t>(bucket_elements, 1, std::max<int64_t>(n, 1))),
        in_flight_(in_flight),
        launched_(n),
        released_(n),
        pages_(pages) {}

  void report(int64_t from, int64_t to) {
    reported_.add(from, to);
    // The reported run that reaches the launch frontier, if any.
    int64_t run_begin = launched_;
    for (const auto& [begin, end] : reported_.ranges()) {
      if (begin < launched_ && end >= launched_) run_begin = begin;
    }
    // The first bucket boundary at or above it.
    const int64_t boundary = run_begin == 0 ? 0 : n_ - (n_ - run_begin) / size_ * size_;
    if (boundary >= launched_) return;
    launched_ = boundary;
    // Buckets launched: all the way down to 0 takes the remainder too.
    const int64_t launched_buckets = (n_ - launched_ + size_ - 1) / size_;
    const int64_t released =
        std::max<int64_t>(0, n_ - std::max<int64_t>(0, launched_buckets - in_flight_) * size_);
    if (released >= released_) return;
    pages_.reduced(released, released_);
    released_ = released;
  }

 private:
  int64_t n_;
  int64_t size_;
  int64_t in_flight_;
  int64_t launched_;  // floats from here on are launched
  int64_t released_;  // and from here on reduced
  RangeSet reported_;
  PageReplay& pages_;
};

}  // namespace

int64_t backward_gradient_peak_bytes(const ParameterTable& table, int64_t bucket_elements,
                                     int64_t buckets_in_flight, int64_t page_bytes) {
  const int64_t n = table.total();
  PageReplay pages(n, page_bytes);
  BucketReplay buckets(n, bucket_elements, buckets_in_flight, pages);
  const auto pass = [&](int64_t begin, int64_t end) {
    pages.prepare(begin, end);
    buckets.report(begin, end);
  };
  if (table.has_head()) {
    // The output layer's rows of the token embedding stay until the
    // encoder's part is in (reported with the position embedding's).
    const TensorInfo& wte = table.tensor(TensorRole::kWte);
    pages.prepare(wte.offset, wte.offset + wte.numel);
    const TensorInfo& weight = table.tensor(TensorRole::kLnfWeight);
    const TensorInfo& bias = table.tensor(TensorRole::kLnfBias);
    pass(weight.offset, bias.offset + bias.numel);
    if (!table.has_embeddings()) buckets.report(wte.offset, wte.offset + wte.numel);
  }
  for (auto chunk = table.chunks().rbegin(); chunk != table.chunks().rend(); ++chunk) {
    for (int layer = chunk->second - 1; layer >= chunk->first; --layer) {
      const auto [begin, end] = table.layer_range(layer);
      pass(begin, end);
    }
  }
  if (table.has_embeddings()) {
    const TensorInfo& wte = table.tensor(TensorRole::kWte);
    const TensorInfo& wpe = table.tensor(TensorRole::kWpe);
    pass(wte.offset, wpe.offset + wpe.numel);
  }
  return pages.peak_bytes();
}

}  // namespace dslaunch::core
