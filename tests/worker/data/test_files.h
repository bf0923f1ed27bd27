#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/temp_files.h"
#include "worker/data/token_source.h"

namespace dslaunch::worker::data::testing {

using dslaunch::testing::read_bytes;
using dslaunch::testing::TempDir;
using dslaunch::testing::write_bytes;

// `value`'s little-endian bytes appended to `out`.
template <typename T>
void append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// Tokens held in memory; counting(n) holds 0, 1, ..., n - 1, so a token is its position.
class VectorSource final : public TokenSource {
 public:
  explicit VectorSource(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {}
  static VectorSource counting(int64_t size) {
    std::vector<int32_t> tokens(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) tokens[i] = static_cast<int32_t>(i);
    return VectorSource(std::move(tokens));
  }

  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  void read(int64_t offset, int64_t count, int32_t* out) const override {
    std::copy(tokens_.begin() + offset, tokens_.begin() + offset + count, out);
  }
  int32_t max_token() const override {
    return tokens_.empty() ? -1 : *std::max_element(tokens_.begin(), tokens_.end());
  }
  std::string describe() const override { return "test tokens"; }

 private:
  std::vector<int32_t> tokens_;
};

}  // namespace dslaunch::worker::data::testing
