#include "worker/selftest/learnable_tokens.h"

#include <random>

namespace dslaunch::worker::selftest {

std::vector<int32_t> learnable_tokens(int64_t count, int32_t vocab, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int> stride_of(1, 7), run_of(8, 40);
  std::vector<int32_t> tokens;
  int64_t value = 0;
  while (static_cast<int64_t>(tokens.size()) < count) {
    const int stride = stride_of(generator);
    for (int i = run_of(generator); i > 0 && static_cast<int64_t>(tokens.size()) < count; --i) {
      value = (value + stride) % vocab;
      tokens.push_back(static_cast<int32_t>(value));
    }
  }
  return tokens;
}

}  // namespace dslaunch::worker::selftest
