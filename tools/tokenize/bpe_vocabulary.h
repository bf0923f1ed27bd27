#pragma once

// The tables of a GPT-2 byte-level BPE tokenizer, and the two file formats
// they come in: OpenAI's vocab.json + merges.txt (also named encoder.json and
// vocab.bpe) and Hugging Face's tokenizer.json.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dslaunch::tools {

// The token that separates documents, when the vocabulary has it.
inline constexpr std::string_view kEndOfText = "<|endoftext|>";

// Ids index tables, so a file that claims a huge id would make them huge; no
// real vocabulary comes near this (GPT-2 has 50257 tokens, the largest common
// ones about 260k).
inline constexpr int64_t kMaxTokenId = (1 << 21) - 1;

// Two adjacent tokens `left`, `right` become the token `merged` (all ids).
struct BpeMerge {
  int32_t left = 0;
  int32_t right = 0;
  int32_t merged = 0;
};

// A checked vocabulary: each id names at most one token and each token has
// one id; each of the 256 single-byte tokens is present; each merge's two
// parts and its result are tokens.
struct BpeVocabulary {
  // Token text by id, in GPT-2's byte alphabet (byte_alphabet.h); "" for an
  // id that no token has. Its size is the largest id + 1.
  std::vector<std::string> tokens;
  // By rank: merges[0] applies first. Where a file lists a pair twice, both
  // entries are here and the later rank counts (as in encoder.py's dict and
  // Hugging Face's map).
  std::vector<BpeMerge> merges;
  std::optional<int32_t> end_of_text;  // the id of kEndOfText
};

// Reads OpenAI's pair of files. vocab.json maps token text to id; merges.txt
// holds one merge "left right" per line in rank order (a first line starting
// "#version" and blank lines are skipped). Fails, naming the file (and for
// merges.txt the line), on: a file that cannot be read; a vocabulary that is
// not a JSON object of integer ids from 0 to kMaxTokenId, has an empty token,
// two tokens with one id, or lacks a single-byte token; a merge line that is
// not two tokens separated by one space, or whose tokens or result are not in
// the vocabulary.
core::StatusOr<BpeVocabulary> load_vocab_and_merges(const std::string& vocab_path,
                                                    const std::string& merges_path);

// Reads Hugging Face's tokenizer.json: model.vocab, model.merges ("left
// right" strings or [left, right] pairs) and added_tokens (special tokens,
// which may lie outside model.vocab). Fails as load_vocab_and_merges does,
// naming the field and the index of a bad merge, and also when the model is
// not BPE, or a normalizer or a pre-tokenizer other than GPT-2's ByteLevel
// would change the text first: GPT-2's rules would then encode differently
// from the tokenizer's own.
core::StatusOr<BpeVocabulary> load_tokenizer_json(const std::string& path);

}  // namespace dslaunch::tools
