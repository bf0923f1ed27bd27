#pragma once

// The byte-level tokenizer behind `tokenize_text` without a vocabulary: one
// token per byte (vocabulary 256), documents separated by token 0 (the NUL
// byte, which text does not contain).

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dslaunch::tools {

inline constexpr uint16_t kDocumentSeparator = 0;

// The bytes of the documents of `paths` (documents.h), in order, with
// kDocumentSeparator between documents. Fails as for_each_document does, on
// no paths, and on a document that contains a NUL byte.
core::StatusOr<std::vector<uint16_t>> tokenize_text_files(const std::vector<std::string>& paths,
                                                          std::string_view jsonl_key);

struct TokenSplit {
  std::span<const uint16_t> train;  // the first tokens
  std::span<const uint16_t> valid;  // the last round(fraction · size) tokens
  std::string error;                // set when a part would be empty or fraction is not in (0, 1)
};

// Splits `tokens` into the first part and the last `fraction` of them.
TokenSplit split_tail(std::span<const uint16_t> tokens, double fraction);

}  // namespace dslaunch::tools
