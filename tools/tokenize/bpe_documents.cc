#include "tools/tokenize/bpe_documents.h"

#include <fmt/format.h>

#include "tools/tokenize/documents.h"

namespace dslaunch::tools {

core::StatusOr<std::vector<uint16_t>> bpe_tokenize_files(BpeTokenizer& tokenizer,
                                                         const std::vector<std::string>& paths,
                                                         std::string_view jsonl_key) {
  if (tokenizer.vocab_size() > kMaxTokenFileVocabulary) {
    return core::invalid_argument(fmt::format(
        "the vocabulary has ids up to {}, but llm.c token files hold uint16 tokens (ids up to "
        "{})",
        tokenizer.vocab_size() - 1, kMaxTokenFileVocabulary - 1));
  }
  if (paths.empty()) return core::invalid_argument("no input files");
  std::vector<uint16_t> tokens;
  std::vector<int32_t> document_tokens;
  bool first = true;
  const core::Status read =
      for_each_document(paths, jsonl_key, [&](const Document& document) -> core::Status {
        if (!first) {
          if (!tokenizer.end_of_text()) {
            return core::invalid_argument(fmt::format(
                "{} is a second document, but the vocabulary has no {} token to separate "
                "documents",
                document.place(), kEndOfText));
          }
          tokens.push_back(static_cast<uint16_t>(*tokenizer.end_of_text()));
        }
        first = false;
        document_tokens.clear();
        if (auto encoded = tokenizer.encode(document.text, document_tokens); !encoded.ok()) {
          return encoded.with_context(document.place());
        }
        // Every id is below kMaxTokenFileVocabulary, checked above.
        tokens.insert(tokens.end(), document_tokens.begin(), document_tokens.end());
        return {};
      });
  if (!read.ok()) return read;
  return tokens;
}

}  // namespace dslaunch::tools
