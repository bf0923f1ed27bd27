#include "tools/tokenize/byte_tokenizer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/mapped_file.h"

namespace dslaunch::tools {

ByteTokens tokenize_text_files(const std::vector<std::string>& paths) {
  ByteTokens result;
  for (const std::string& path : paths) {
    core::MappedFile file;
    std::string error;
    if (!file.open(path, error)) return {{}, error};
    if (file.size() == 0) {
      return {{}, fmt::format("'{}' is empty: there is nothing to tokenize", path)};
    }
    const uint8_t* bytes = file.bytes();
    const uint8_t* nul = std::find(bytes, bytes + file.size(), uint8_t{0});
    if (nul != bytes + file.size()) {
      return {{},
              fmt::format("'{}' has a NUL byte at offset {}: not a text file (token 0 separates "
                          "documents, so text must not contain it)",
                          path, nul - bytes)};
    }
    if (!result.tokens.empty()) result.tokens.push_back(kDocumentSeparator);
    result.tokens.insert(result.tokens.end(), bytes, bytes + file.size());
  }
  if (result.tokens.empty()) return {{}, "no input files"};
  return result;
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
