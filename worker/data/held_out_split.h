#pragma once

#include <cstdint>
#include <string>

#include "worker/data/token_source.h"

namespace dslaunch::worker::data {

// The share of tokens held out for evaluation when the job gives no
// data.valid: Megatron's default split "969,30,1" puts about 3% in validation.
inline constexpr double kHeldOutFraction = 0.03;

struct HeldOutSplit {
  TokenRange train;
  TokenRange valid;
  std::string error;  // set when the source is too small; the ranges are then empty
};

// Splits `source` into train = the first tokens and valid = the last
// ceil(3%) of them, but at least one window of seq_len + 1 tokens, so the
// valid part always yields an evaluation window. The parts do not overlap.
// Fails when the train part would hold less than one window.
// Precondition: seq_len >= 1.
HeldOutSplit split_held_out(const TokenSource& source, int64_t seq_len);

}  // namespace dslaunch::worker::data
