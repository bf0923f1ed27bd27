#pragma once

// llm.c token files: a header of 256 little-endian int32 (magic 20240520,
// version 1, token count, the rest zero), then the tokens as uint16.

#include <cstdint>
#include <span>
#include <string>

#include "worker/data/token_source.h"

namespace dslaunch::worker::data {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

// Maps the token file at `path` and checks its header and size against each
// other; then scans the tokens once for max_token() (one pass over the file:
// about a second per few GB once it is in the page cache). The error names
// the file, what is wrong and what was expected.
TokenSourceResult open_llmc_token_file(const std::string& path);

// Whether `path` is a readable file that starts with the llm.c magic number
// (reads 4 bytes). Used to tell token files from Megatron datasets.
bool has_llmc_magic(const std::string& path);

// The bytes of a token file holding `tokens`. Precondition:
// tokens.size() <= INT32_MAX (the header's count is an int32).
std::string llmc_token_file_bytes(std::span<const uint16_t> tokens);

// Writes `tokens` as a token file at `path`, atomically (see
// write_file_atomically). Returns false with `error` set when there are more
// tokens than an int32 counts or the file cannot be written.
bool write_llmc_token_file(const std::string& path, std::span<const uint16_t> tokens,
                           std::string& error);

}  // namespace dslaunch::worker::data
