#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/data/token_source.h"

namespace dslaunch::worker::data {

// Ranges of other sources read one after the other as one stream: a dataset
// of several token files (llm.c's shards), or the held-out tails of several
// datasets. The ranges' sources must outlive it; reads are as thread-safe
// as theirs.
class ConcatenatedSource final : public TokenSource {
 public:
  // Precondition: `parts` is not empty.
  explicit ConcatenatedSource(std::vector<TokenRange> parts);

  int64_t size() const override { return starts_.back(); }
  void read(int64_t offset, int64_t count, int32_t* out) const override;
  int32_t max_token() const override { return max_token_; }
  std::string describe() const override;

 private:
  std::vector<TokenRange> parts_;
  std::vector<int64_t> starts_;  // parts_.size() + 1 offsets: part i is [starts_[i], starts_[i+1])
  int32_t max_token_ = -1;
};

}  // namespace dslaunch::worker::data
