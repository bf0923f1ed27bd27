#include "worker/parallel/gradient_buckets.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "worker/parallel/block_quantizer.h"

namespace dslaunch::worker {

int64_t capped_bucket_elements(int64_t n, int64_t bucket_elements) {
  return std::min<int64_t>({bucket_elements, kMaxQuantizableCount, std::max<int64_t>(n, 1)});
}

std::vector<GradientBucket> gradient_buckets(int64_t n, int64_t bucket_elements) {
  const int64_t size = capped_bucket_elements(n, bucket_elements);
  std::vector<GradientBucket> buckets;
  for (int64_t end = n; end > 0; end -= size)
    buckets.push_back({std::max<int64_t>(0, end - size), end});
  return buckets;
}

comm::Blocks bucket_shares(const ZeroPartition& partition, int64_t begin, int64_t end) {
  comm::Blocks blocks;
  int64_t displacement = 0;
  for (int r = 0; r < partition.ranks; ++r) {
    const int64_t count =
        std::max<int64_t>(0, std::min(end, partition.end(r)) - std::max(begin, partition.begin(r)));
    blocks.counts.push_back(count);
    blocks.displacements.push_back(displacement);
    displacement += count;
  }
  return blocks;
}

BucketProgress::BucketProgress(int64_t n, int64_t bucket_elements)
    : n_(n),
      bucket_elements_(capped_bucket_elements(n, bucket_elements)),
      buckets_(gradient_buckets(n, bucket_elements)),
      unreported_(buckets_.size()) {
  reset();
}

core::Status BucketProgress::report(int64_t begin, int64_t end, std::string_view what) {
  if (begin < 0 || end > n_ || begin > end) {
    return core::invalid_argument(
        fmt::format("{}: ready [{}, {}) is not a range inside [0, {})", what, begin, end, n_));
  }
  if (begin == end) return {};
  // Buckets are cut from the buffer's end.
  const int64_t first = (n_ - end) / bucket_elements_;
  const int64_t last = (n_ - 1 - begin) / bucket_elements_;
  const auto covered = [&](int64_t k) {
    return std::min(end, buckets_[k].end) - std::max(begin, buckets_[k].begin);
  };
  for (int64_t k = first; k <= last; ++k) {
    if (covered(k) > unreported_[k]) {
      return core::invalid_argument(fmt::format(
          "{}: ready [{}, {}) reports floats already reported this step (bucket [{}, {}))", what,
          begin, end, buckets_[k].begin, buckets_[k].end));
    }
  }
  for (int64_t k = first; k <= last; ++k) unreported_[k] -= covered(k);
  return {};
}

std::pair<int64_t, int64_t> BucketProgress::take_complete() {
  const int64_t first = taken_;
  const int64_t count = static_cast<int64_t>(buckets_.size());
  while (taken_ < count && unreported_[taken_] == 0) ++taken_;
  return {first, taken_};
}

core::Status BucketProgress::all_taken(std::string_view what) const {
  if (taken_ == static_cast<int64_t>(buckets_.size())) return {};
  const GradientBucket& bucket = buckets_[taken_];
  return core::invalid_argument(
      fmt::format("{}: finish() before all gradients were reported: {} floats of bucket [{}, {}) "
                  "were never passed to ready()",
                  what, unreported_[taken_], bucket.begin, bucket.end));
}

void BucketProgress::reset() {
  for (size_t k = 0; k < buckets_.size(); ++k) {
    unreported_[k] = buckets_[k].end - buckets_[k].begin;
  }
  taken_ = 0;
}

}  // namespace dslaunch::worker
