#include "tools/tokenize/byte_tokenizer.h"

#include <cmath>

#include <fmt/format.h>

#include "tools/tokenize/documents.h"

namespace dslaunch::tools {

core::StatusOr<std::vector<uint16_t>> tokenize_text_files(const std::vector<std::string>& paths,
                                                          std::string_view jsonl_key) {
  if (paths.empty()) return core::invalid_argument("no input files");
  std::vector<uint16_t> tokens;
  const core::Status read =
      for_each_document(paths, jsonl_key, [&](const Document& document) -> core::Status {
        if (const size_t nul = document.text.find('\0'); nul != std::string_view::npos) {
          return core::invalid_argument(fmt::format(
              "{} has a NUL byte at offset {}: not text (token 0 separates documents, so text "
              "must not contain it)",
              document.place(), nul));
        }
        if (!tokens.empty()) tokens.push_back(kDocumentSeparator);
        tokens.insert(
            tokens.end(), reinterpret_cast<const uint8_t*>(document.text.data()),
            reinterpret_cast<const uint8_t*>(document.text.data()) + document.text.size());
        return {};
      });
  if (!read.ok()) return read;
  return tokens;
}

TokenSplit split_tail(std::span<const uint16_t> tokens, double fraction) {
  if (!(fraction > 0 && fraction < 1)) {
    return {{}, {}, fmt::format("the validation fraction {} must be between 0 and 1", fraction)};
  }
  const auto valid =
      static_cast<size_t>(std::llround(fraction * static_cast<double>(tokens.size())));
  if (valid == 0 || valid == tokens.size()) {
    return {{},
            {},
            fmt::format("a validation fraction of {} of {} tokens leaves {} part empty", fraction,
                        tokens.size(), valid == 0 ? "the validation" : "the training")};
  }
  return {tokens.first(tokens.size() - valid), tokens.last(valid), ""};
}

}  // namespace dslaunch::tools
