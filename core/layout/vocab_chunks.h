#pragma once

#include <algorithm>
#include <cstdint>

namespace dslaunch::core {

// The tied output layer's rows, cut into chunks the model runs one after the
// other: a chunk's logits, and its gradient with respect to the token
// embedding, are one matrix product each. ZeRO stage 3 gathers the token
// embedding a chunk at a time around that use, and reduces the output
// layer's part of its gradient a chunk at a time, so neither is ever whole
// in memory. Every stage computes in the same chunks, so every stage gets
// the same bits.
//
// At least kMinChunks chunks where there are that many rows, each at most
// kMaxChunkFloats floats (rows times channels): GPT-2's 50304 x 768 table
// runs in 10 chunks of up to 5461 rows, 16.8 MB each.
struct VocabChunks {
  static constexpr int64_t kMinChunks = 8;
  static constexpr int64_t kMaxChunkFloats = int64_t{4} << 20;

  int64_t rows = 0;       // the rows a rank holds (Vl)
  int64_t per_chunk = 1;  // rows in every chunk but the last

  VocabChunks(int64_t rows_held, int64_t channels) : rows(rows_held) {
    const int64_t even = (rows + kMinChunks - 1) / kMinChunks;
    const int64_t largest = std::max<int64_t>(1, kMaxChunkFloats / std::max<int64_t>(channels, 1));
    per_chunk = std::max<int64_t>(1, std::min(even, largest));
  }

  int count() const { return static_cast<int>((rows + per_chunk - 1) / per_chunk); }
  int64_t begin(int chunk) const { return chunk * per_chunk; }
  int64_t end(int chunk) const { return std::min(rows, (chunk + 1) * per_chunk); }
};

// The token embedding's three uses, each a pass over its vocabulary chunks
// (of the rows the rank holds): the encoder at the start of forward, the
// tied output layer at its end and at the start of backward.
enum class VocabUse { kEncoder, kOutputForward, kOutputBackward };

}  // namespace dslaunch::core
