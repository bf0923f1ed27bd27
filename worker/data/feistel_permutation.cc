#include "worker/data/feistel_permutation.h"

#include <bit>

namespace dslaunch::worker::data {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

FeistelPermutation::FeistelPermutation(uint64_t n, uint64_t key) : n_(n) {
  const int bits = n <= 1 ? 0 : std::bit_width(n - 1);
  half_bits_ = bits <= 2 ? 1 : (bits + 1) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t state = key;
  for (uint64_t& round_key : round_keys_) {
    state = mix64(state);
    round_key = state;
  }
}

uint64_t FeistelPermutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (const uint64_t round_key : round_keys_) {
    const uint64_t next = left ^ (mix64(right ^ round_key) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t FeistelPermutation::operator()(uint64_t i) const {
  // Cycle walking: the encryption permutes the whole domain, so following
  // its cycle from i reaches a value below n, and distinct i reach distinct values.
  uint64_t x = encrypt(i);
  while (x >= n_) x = encrypt(x);
  return x;
}

}  // namespace dslaunch::worker::data
