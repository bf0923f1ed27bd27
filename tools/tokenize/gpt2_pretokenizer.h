#pragma once

// GPT-2's pre-tokenization: the text cut into the pieces that BPE then
// encodes one at a time, with the pattern of OpenAI's encoder.py
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// run by PCRE2 in UTF mode (JIT-compiled where PCRE2 has a JIT).
//
// Two differences from Python's `regex` module, both out of reach of
// ordinary text: \s is spelled out as Unicode's White_Space (what `regex`,
// tiktoken and Hugging Face match), because PCRE2's \s also takes U+180E;
// and \p{L}, \p{N} follow PCRE2's Unicode tables (14.0 in Debian 12), so a
// letter assigned later counts as punctuation here.

#include <functional>
#include <memory>
#include <string_view>
#include <utility>

#include <pcre2.h>

#include "core/status.h"

namespace dslaunch::tools {

class Gpt2Pretokenizer {
 public:
  // Compiles the pattern; fails only if this PCRE2 lacks Unicode support.
  static core::StatusOr<Gpt2Pretokenizer> create();

  // Calls `piece` with each piece of `text`, in order; the pieces joined are
  // `text`. Text must be valid UTF-8: GPT-2's encoder.py, tiktoken and Hugging
  // Face all take decoded strings, so invalid bytes have no reference
  // encoding, and repairing them (U+FFFD) would give tokens that do not decode
  // to the input. Such text fails before the first piece, with the byte offset
  // of the first bad sequence. Thread-safe: each call has its own match state.
  core::Status split(std::string_view text,
                     const std::function<void(std::string_view)>& piece) const;

 private:
  struct CodeDeleter {
    void operator()(pcre2_code* code) const;
  };
  explicit Gpt2Pretokenizer(std::unique_ptr<pcre2_code, CodeDeleter> code)
      : code_(std::move(code)) {}

  std::unique_ptr<pcre2_code, CodeDeleter> code_;
};

}  // namespace dslaunch::tools
