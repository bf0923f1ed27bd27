#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/data/token_source.h"

namespace dslaunch::worker::data {

// Tokens held in memory, for what trains without files (`selftest`, the
// benchmarks). `tokens` must not be empty.
class TokensInMemory final : public TokenSource {
 public:
  explicit TokensInMemory(std::vector<int32_t> tokens);
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  void read(int64_t offset, int64_t count, int32_t* out) const override;
  int32_t max_token() const override { return max_; }
  std::string describe() const override;

 private:
  std::vector<int32_t> tokens_;
  int32_t max_;
};

}  // namespace dslaunch::worker::data
