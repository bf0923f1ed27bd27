#pragma once

// GPT-2's byte-level BPE tokenizer: the encoding of OpenAI's encoder.py,
// Hugging Face's GPT2Tokenizer and tiktoken's "gpt2", for any vocabulary in
// that scheme. Text is cut into pieces by GPT-2's pattern
// (gpt2_pretokenizer.h); each piece's bytes start as single-byte tokens, and
// the merges are applied by rank, every occurrence of the best-ranked
// adjacent pair at once, left to right, until no ranked pair remains.
//
// Text that spells "<|endoftext|>" is encoded as ordinary text, as
// encoder.py and tiktoken's encode_ordinary do: only the caller puts the
// end-of-text token between documents.

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tools/tokenize/bpe_vocabulary.h"
#include "tools/tokenize/gpt2_pretokenizer.h"

namespace dslaunch::tools {

// Not thread-safe: encode() fills a cache of pieces already seen. Use one
// tokenizer per thread. Movable.
class BpeTokenizer {
 public:
  // From OpenAI's vocab.json and merges.txt, or Hugging Face's
  // tokenizer.json; fails as the loaders in bpe_vocabulary.h do.
  static core::StatusOr<BpeTokenizer> from_vocab_and_merges(const std::string& vocab_path,
                                                            const std::string& merges_path);
  static core::StatusOr<BpeTokenizer> from_tokenizer_json(const std::string& path);
  // From a vocabulary the loaders checked. Fails only if PCRE2 cannot compile
  // GPT-2's pattern.
  static core::StatusOr<BpeTokenizer> create(BpeVocabulary vocabulary);

  // Appends the tokens of `text` to `out`. Fails on text that is not valid
  // UTF-8, naming the byte offset, and then appends nothing.
  core::Status encode(std::string_view text, std::vector<int32_t>& out);

  // The bytes that `ids` stand for. Fails on an id that no token has.
  core::StatusOr<std::string> decode(std::span<const int32_t> ids) const;

  std::optional<int32_t> end_of_text() const { return end_of_text_; }
  // The largest id + 1: the size of an embedding table for these tokens.
  int64_t vocab_size() const { return static_cast<int64_t>(token_bytes_.size()); }

 private:
  BpeTokenizer(Gpt2Pretokenizer pretokenizer, BpeVocabulary vocabulary);

  // The tokens of one piece, by the merges alone (no cache).
  std::vector<int32_t> merge_piece(std::string_view piece) const;
  // The rank of merging `left` with `right`, or -1 when no merge joins them.
  int32_t rank(int32_t left, int32_t right) const;

  Gpt2Pretokenizer pretokenizer_;
  std::vector<std::string> token_bytes_;  // by id; "" for an id no token has
  std::array<int32_t, 256> byte_tokens_{};
  std::vector<BpeMerge> merges_;                 // by rank
  std::unordered_map<uint64_t, int32_t> ranks_;  // (left << 32 | right) -> rank
  std::optional<int32_t> end_of_text_;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;  // piece -> its tokens
};

}  // namespace dslaunch::tools
