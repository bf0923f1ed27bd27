#include "worker/parallel/gradient_buckets.h"

#include <algorithm>

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

}  // namespace dslaunch::worker
