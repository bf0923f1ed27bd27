#pragma once

// Megatron-LM's indexed datasets (megatron/core/datasets/indexed_dataset.py):
// `<prefix>.bin` holds the tokens of every sequence, `<prefix>.idx` says
// where each sequence is. The .idx layout, little-endian:
//   9 bytes   magic "MMIDIDX\0\0"
//   uint64    version, 1
//   uint8     dtype code of the tokens (Megatron's DType enum: 1 uint8,
//             2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32,
//             8 uint16; only the integer types hold token ids)
//   uint64    sequence count S
//   uint64    document-index count D (documents + 1: the index starts at 0)
//   int32     sizes[S]             tokens in each sequence
//   int64     pointers[S]          byte offset of each sequence in .bin
//   int64     document_indices[D]  sequence index where each document ends
//   int8      modes[S]             only in multimodal datasets; ignored here
// The token stream is all sequences concatenated in index order, as
// Megatron's GPT dataset samples across document boundaries.

#include <cstdint>
#include <string>

#include "worker/data/token_source.h"

namespace dslaunch::worker::data {

// Maps `<prefix>.idx` and `<prefix>.bin` and validates the index against
// itself and the .bin size; then scans every token once, for max_token()
// and to reject ids that are negative or do not fit an int32 (one pass over
// the .bin file). Keeps one int64 per sequence in memory (where each starts
// in the stream). The error names the file, what is wrong and what was
// expected.
TokenSourceResult open_megatron_indexed_dataset(const std::string& prefix);

}  // namespace dslaunch::worker::data
