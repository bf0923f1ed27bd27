#include "worker/token_text.h"

#include <filesystem>
#include <utility>

#include <fmt/format.h>

namespace dslaunch::worker {

namespace fs = std::filesystem;

TokenText TokenText::bytes(int64_t model_vocab) {
  TokenText text(Kind::kBytes);
  text.model_vocab_ = model_vocab;
  return text;
}

TokenText TokenText::ids_only() { return TokenText(Kind::kIds); }

TokenText TokenText::bpe(tools::BpeTokenizer tokenizer) {
  TokenText text(Kind::kBpe);
  text.tokenizer_.emplace(std::move(tokenizer));
  return text;
}

core::StatusOr<std::vector<int32_t>> TokenText::encode(std::string_view text) {
  std::vector<int32_t> tokens;
  switch (kind_) {
    case Kind::kBytes:
      for (const char c : text) {
        const int32_t byte = static_cast<unsigned char>(c);
        if (byte >= model_vocab_) {
          return core::invalid_argument(fmt::format(
              "byte 0x{:02X} is outside the model's vocabulary of {}", byte, model_vocab_));
        }
        tokens.push_back(byte);
      }
      return tokens;
    case Kind::kBpe:
      if (core::Status encoded = tokenizer_->encode(text, tokens); !encoded.ok()) return encoded;
      return tokens;
    case Kind::kIds:
      break;
  }
  return core::invalid_argument(
      "text needs a byte-level model or a tokenizer (--tokenizer, or --vocab with --merges, or "
      "those files beside the weights); or give --prompt-tokens");
}

std::string TokenText::decode(int32_t token) const {
  if (kind_ == Kind::kBytes && token >= 0 && token < 256) {
    return std::string(1, static_cast<char>(token));
  }
  if (kind_ == Kind::kBpe) {
    const int32_t ids[] = {token};
    core::StatusOr<std::string> bytes = tokenizer_->decode(ids);
    if (bytes.ok()) return std::move(*bytes);
  }
  return fmt::format("<|id {}|>", token);
}

std::optional<std::vector<int32_t>> TokenText::default_prompt() const {
  if (kind_ == Kind::kBytes) return std::vector<int32_t>{'\n'};
  if (kind_ == Kind::kBpe && tokenizer_->end_of_text()) {
    return std::vector<int32_t>{*tokenizer_->end_of_text()};
  }
  return std::nullopt;
}

std::optional<TokenizerFiles> tokenizer_files_in(const std::string& folder) {
  const fs::path dir(folder);
  std::error_code ignored;
  if (fs::is_regular_file(dir / "tokenizer.json", ignored)) {
    return TokenizerFiles{(dir / "tokenizer.json").string(), "", ""};
  }
  if (fs::is_regular_file(dir / "vocab.json", ignored) &&
      fs::is_regular_file(dir / "merges.txt", ignored)) {
    return TokenizerFiles{"", (dir / "vocab.json").string(), (dir / "merges.txt").string()};
  }
  return std::nullopt;
}

core::StatusOr<TokenText> load_bpe_text(const TokenizerFiles& files, int64_t model_vocab) {
  const bool from_json = !files.tokenizer_json.empty();
  core::StatusOr<tools::BpeTokenizer> loaded =
      from_json ? tools::BpeTokenizer::from_tokenizer_json(files.tokenizer_json)
                : tools::BpeTokenizer::from_vocab_and_merges(files.vocab, files.merges);
  if (!loaded.ok()) return loaded.status();
  const std::string source =
      from_json ? files.tokenizer_json : fmt::format("{} and {}", files.vocab, files.merges);
  if (loaded->vocab_size() > model_vocab) {
    return core::invalid_argument(
        fmt::format("the tokenizer {} has {} tokens, more than the model's vocabulary of {}",
                    source, loaded->vocab_size(), model_vocab));
  }
  return TokenText::bpe(std::move(*loaded));
}

}  // namespace dslaunch::worker
