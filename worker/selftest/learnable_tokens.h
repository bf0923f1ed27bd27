#pragma once

#include <cstdint>
#include <vector>

namespace dslaunch::worker::selftest {

// Tokens below `vocab` that a small model can learn: runs of an arithmetic
// sequence mod the vocabulary whose stride changes at random points,
// deterministic in `seed`.
std::vector<int32_t> learnable_tokens(int64_t count, int32_t vocab, uint32_t seed);

}  // namespace dslaunch::worker::selftest
