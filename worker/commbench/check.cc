#include "worker/commbench/check.h"

#include <algorithm>

namespace dslaunch::worker::commbench {
namespace {

// A prime, so that no power-of-two (or rank-multiple) offset between blocks
// maps a block onto the values of another.
constexpr int64_t kIndexPeriod = 997;
// Reduced collectives: each rank adds 1 + rank % 61 + index % 997, at most
// 1057, so a sum over 15,000 ranks stays below 2^24 and exact in float32.
constexpr int kSumRankPeriod = 61;
// Moved collectives: rank % 16000 * 1000 + index % 997 < 2^24, exact, and
// distinct for every rank of a group of up to 16,000.
constexpr int kMoveRankPeriod = 16000;
constexpr int64_t kMoveRankScale = 1000;

bool is_reduction(Collective collective) {
  return collective == Collective::all_reduce || collective == Collective::reduce_scatter;
}

int64_t rank_term(Collective collective, int rank) {
  if (is_reduction(collective)) return 1 + rank % kSumRankPeriod;
  return rank % kMoveRankPeriod * kMoveRankScale;
}

// Counts the elements of `out` differing from base + scale * ((first + j) % 997),
// stepping the period by hand: this runs over every element of every message.
int64_t count_wrong_run(std::span<const float> out, int64_t base, int64_t scale, int64_t first) {
  int64_t wrong = 0;
  int64_t phase = first % kIndexPeriod;
  for (float value : out) {
    if (value != static_cast<float>(base + scale * phase)) ++wrong;
    if (++phase == kIndexPeriod) phase = 0;
  }
  return wrong;
}

}  // namespace

float input_value(Collective collective, int rank, int64_t index) {
  return static_cast<float>(rank_term(collective, rank) + index % kIndexPeriod);
}

void fill_input(Collective collective, int rank, std::span<float> input) {
  const int64_t base = rank_term(collective, rank);
  int64_t phase = 0;
  for (float& value : input) {
    value = static_cast<float>(base + phase);
    if (++phase == kIndexPeriod) phase = 0;
  }
}

int64_t count_wrong(Collective collective, const Message& message, int rank, int ranks,
                    std::span<const float> output) {
  if (static_cast<int64_t>(output.size()) != message.recv_count) return message.recv_count;
  const int64_t chunk = message.chunk;
  if (is_reduction(collective)) {
    // Every element sums the rank terms of all ranks plus `ranks` times its
    // index term; reduce_scatter keeps block `rank` of the indices.
    int64_t rank_sum = 0;
    for (int q = 0; q < ranks; ++q) rank_sum += rank_term(collective, q);
    const int64_t first = collective == Collective::reduce_scatter ? rank * chunk : 0;
    return count_wrong_run(output, rank_sum, ranks, first);
  }
  // Block q of the output comes from rank q: its first `chunk` elements for
  // all_gather, its block `rank` for all_to_all.
  const int64_t first = collective == Collective::all_to_all ? rank * chunk : 0;
  int64_t wrong = 0;
  for (int q = 0; q < ranks; ++q) {
    wrong += count_wrong_run(output.subspan(q * chunk, chunk), rank_term(collective, q), 1, first);
  }
  return wrong;
}

}  // namespace dslaunch::worker::commbench
