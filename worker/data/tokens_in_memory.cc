#include "worker/data/tokens_in_memory.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace dslaunch::worker::data {

TokensInMemory::TokensInMemory(std::vector<int32_t> tokens)
    : tokens_(std::move(tokens)), max_(*std::max_element(tokens_.begin(), tokens_.end())) {}

void TokensInMemory::read(int64_t offset, int64_t count, int32_t* out) const {
  std::copy_n(tokens_.begin() + offset, count, out);
}

std::string TokensInMemory::describe() const {
  return fmt::format("{} tokens in memory", tokens_.size());
}

}  // namespace dslaunch::worker::data
