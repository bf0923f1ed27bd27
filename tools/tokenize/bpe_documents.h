#pragma once

// tokenize_text with a GPT-2 BPE vocabulary: the tokens of the input
// documents, as uint16 for an llm.c token file.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tools/tokenize/bpe_tokenizer.h"

namespace dslaunch::tools {

// llm.c token files hold uint16 tokens.
inline constexpr int64_t kMaxTokenFileVocabulary = 65536;

// The tokens of the documents of `paths` (documents.h), in order, with the
// tokenizer's end-of-text token between documents. Fails, before reading any
// input, when the vocabulary has an id above 65535; when a second document
// comes and the vocabulary has no end-of-text token; on no paths; and on a
// document that for_each_document or encode refuses (the message names it).
core::StatusOr<std::vector<uint16_t>> bpe_tokenize_files(BpeTokenizer& tokenizer,
                                                         const std::vector<std::string>& paths,
                                                         std::string_view jsonl_key);

}  // namespace dslaunch::tools
