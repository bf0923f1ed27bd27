#pragma once

#include <cstdint>

namespace dslaunch::worker::data {

// A pseudo-random permutation of [0, n) chosen by `key`, evaluated one index
// at a time in O(1) memory: a balanced Feistel network on the smallest
// even-width bit domain 2^(2h) >= n, with "cycle walking" (re-encrypt while
// the result is >= n) to stay inside [0, n). The domain is at most 4n, so a
// call takes at most 4 encryptions on average. Chosen over an affine map
// (a·i + b mod n), whose neighbours stay evenly spaced, because its outputs
// look independent. Cheap to construct; immutable and thread-safe.
class FeistelPermutation {
 public:
  // Precondition: n >= 1.
  FeistelPermutation(uint64_t n, uint64_t key);

  // The image of i. Precondition: i < n.
  uint64_t operator()(uint64_t i) const;

  uint64_t size() const { return n_; }

 private:
  static constexpr int kRounds = 6;

  uint64_t encrypt(uint64_t x) const;

  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t round_keys_[kRounds];
};

// SplitMix64's output function: a fast bijective mixer of 64-bit values,
// used to derive keys from seeds.
uint64_t mix64(uint64_t x);

}  // namespace dslaunch::worker::data
