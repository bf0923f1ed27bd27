#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tools/tokenize/bpe_tokenizer.h"

namespace dslaunch::worker {

// How a prompt becomes a model's tokens and its tokens become text again:
// by bytes (a byte-level model: token i is byte i), by a GPT-2 BPE
// vocabulary, or not at all (a model whose vocabulary is not known here:
// token ids in and out).
class TokenText {
 public:
  static TokenText bytes(int64_t model_vocab);
  static TokenText ids_only();
  static TokenText bpe(tools::BpeTokenizer tokenizer);

  bool has_text() const { return kind_ != Kind::kIds; }

  // The tokens of `text`. Fails for ids_only, on text the BPE vocabulary
  // refuses (not UTF-8), and on a byte past a small byte-level model's
  // vocabulary.
  core::StatusOr<std::vector<int32_t>> encode(std::string_view text);
  // The bytes `token` stands for; an id no token of the vocabulary has (a
  // padded model's extra rows) shows as "<|id N|>".
  std::string decode(int32_t token) const;
  // Where a prompt starts when none is given: a new line for bytes, BPE's
  // <|endoftext|> (as GPT-2's unconditional samples start); none otherwise.
  std::optional<std::vector<int32_t>> default_prompt() const;

 private:
  enum class Kind { kBytes, kBpe, kIds };
  explicit TokenText(Kind kind) : kind_(kind) {}

  Kind kind_;
  int64_t model_vocab_ = 0;
  std::optional<tools::BpeTokenizer> tokenizer_;
};

// The tokenizer files beside a model's weights, as Hugging Face keeps them:
// `folder`/tokenizer.json, else `folder`/vocab.json with merges.txt.
// nullopt when there are none.
struct TokenizerFiles {
  std::string tokenizer_json;  // or
  std::string vocab, merges;
};
std::optional<TokenizerFiles> tokenizer_files_in(const std::string& folder);

// The BPE TokenText of `files` for a model of `model_vocab` tokens; fails
// as the loaders do (naming the file), and when the vocabulary has more
// tokens than the model.
core::StatusOr<TokenText> load_bpe_text(const TokenizerFiles& files, int64_t model_vocab);

}  // namespace dslaunch::worker
