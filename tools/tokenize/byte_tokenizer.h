#pragma once

// The byte-level tokenizer behind `tokenize_text`: one token per byte
// (vocabulary 256), each input file one document, documents separated by
// token 0 (the NUL byte, which text files do not contain).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dslaunch::tools {

inline constexpr uint16_t kDocumentSeparator = 0;

struct ByteTokens {
  std::vector<uint16_t> tokens;
  std::string error;  // names the file and what is wrong; tokens are then empty
};

// The bytes of `paths` in order, with kDocumentSeparator between files.
// Fails on an unreadable or empty file, or one that contains a NUL byte.
ByteTokens tokenize_text_files(const std::vector<std::string>& paths);

struct TokenSplit {
  std::span<const uint16_t> train;  // the first tokens
  std::span<const uint16_t> valid;  // the last round(fraction · size) tokens
  std::string error;                // set when a part would be empty or fraction is not in (0, 1)
};

// Splits `tokens` into the first part and the last `fraction` of them.
TokenSplit split_tail(std::span<const uint16_t> tokens, double fraction);

}  // namespace dslaunch::tools
