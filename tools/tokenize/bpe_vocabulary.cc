#include "tools/tokenize/bpe_vocabulary.h"

#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "core/mapped_file.h"
#include "tools/tokenize/byte_alphabet.h"

namespace dslaunch::tools {
namespace {

using nlohmann::json;

core::StatusOr<std::string> read_file(const std::string& path) {
  core::MappedFile file;
  std::string error;
  if (!file.open(path, error)) return core::Status(core::StatusCode::kIoError, error);
  return std::string(reinterpret_cast<const char*>(file.bytes()), static_cast<size_t>(file.size()));
}

core::StatusOr<json> read_json(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok()) return text.status();
  std::string error;
  auto parsed = core::parse_untrusted_json(*text, error);
  if (!parsed) return core::invalid_argument(fmt::format("'{}' is not JSON: {}", path, error));
  return std::move(*parsed);
}

// `text` quoted and escaped as JSON writes it, for a message.
std::string json_quoted(std::string_view text) {
  return core::json_excerpt(json(std::string(text)));
}

// The id that `value` holds, or -1 when it is not an integer from 0 to
// kMaxTokenId (nlohmann keeps parsed non-negative integers as unsigned).
int64_t token_id(const json& value) {
  if (value.is_number_unsigned()) {
    const auto id = value.get<uint64_t>();
    return id <= static_cast<uint64_t>(kMaxTokenId) ? static_cast<int64_t>(id) : -1;
  }
  if (value.is_number_integer()) {
    const auto id = value.get<int64_t>();
    return id >= 0 && id <= kMaxTokenId ? id : -1;
  }
  return -1;
}

// "left right" as its two tokens; nullopt unless one space separates two
// non-empty tokens (GPT-2's alphabet has no space, so a token never holds one).
std::optional<std::pair<std::string, std::string>> split_merge(std::string_view line) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string_view::npos) {
    return std::nullopt;
  }
  return std::pair{std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
}

// Collects the tokens, checks them, then collects the merges (which must
// name tokens added before them). Every `where` names the file and the entry
// for messages.
class VocabularyBuilder {
 public:
  core::Status add_token(const std::string& text, const json& id, const std::string& where) {
    const int64_t value = token_id(id);
    if (value < 0) {
      return core::invalid_argument(
          fmt::format("{}: token {} has id {}; ids are integers from 0 to {}", where,
                      json_quoted(text), core::json_excerpt(id), kMaxTokenId));
    }
    if (text.empty())
      return core::invalid_argument(fmt::format("{}: id {} is an empty token", where, value));
    const auto [known, inserted] = ids_.emplace(text, static_cast<int32_t>(value));
    if (!inserted && known->second != value) {
      return core::invalid_argument(fmt::format("{}: token {} has two ids, {} and {}", where,
                                                json_quoted(text), known->second, value));
    }
    std::vector<std::string>& tokens = vocabulary_.tokens;
    if (tokens.size() <= static_cast<size_t>(value)) tokens.resize(static_cast<size_t>(value) + 1);
    if (!tokens[value].empty() && tokens[value] != text) {
      return core::invalid_argument(fmt::format("{}: tokens {} and {} both have id {}", where,
                                                json_quoted(tokens[value]), json_quoted(text),
                                                value));
    }
    tokens[value] = text;
    return {};
  }

  core::Status add_tokens(const json& object, const std::string& where) {
    if (!object.is_object()) {
      return core::invalid_argument(fmt::format("{} is not a JSON object of token ids", where));
    }
    for (const auto& [text, id] : object.items()) {
      if (auto added = add_token(text, id, where); !added.ok()) return added;
    }
    return {};
  }

  core::Status add_merge(const std::string& left, const std::string& right,
                         const std::string& where) {
    const std::string merged = left + right;
    for (const std::string* text : {&left, &right, &merged}) {
      if (!ids_.contains(*text)) {
        return core::invalid_argument(fmt::format("{}: merge {} {}: {} is not in the vocabulary",
                                                  where, json_quoted(left), json_quoted(right),
                                                  json_quoted(*text)));
      }
    }
    vocabulary_.merges.push_back({ids_.at(left), ids_.at(right), ids_.at(merged)});
    return {};
  }

  // After the tokens and before the merges: a vocabulary without every
  // single-byte token cannot encode every text. `vocab_where` names it.
  core::Status check_byte_tokens(const std::string& vocab_where) const {
    for (int byte = 0; byte < 256; ++byte) {
      const std::string& character = byte_character(static_cast<uint8_t>(byte));
      if (!ids_.contains(character)) {
        return core::invalid_argument(
            fmt::format("{} has no token for byte 0x{:02X} ({}): a byte-level BPE vocabulary "
                        "has one for each of the 256 bytes",
                        vocab_where, byte, json_quoted(character)));
      }
    }
    return {};
  }

  BpeVocabulary finish() && {
    if (const auto found = ids_.find(std::string(kEndOfText)); found != ids_.end()) {
      vocabulary_.end_of_text = found->second;
    }
    return std::move(vocabulary_);
  }

 private:
  BpeVocabulary vocabulary_;
  std::unordered_map<std::string, int32_t> ids_;
};

// Refuses a tokenizer.json that changes the text before its BPE in a way
// GPT-2's rules do not; no pre-tokenizer is taken to mean GPT-2's.
core::Status check_gpt2_text_rules(const json& root, const std::string& file) {
  const auto normalizer = root.find("normalizer");
  if (normalizer != root.end() && !normalizer->is_null()) {
    return core::invalid_argument(fmt::format(
        "{} has a normalizer ({}); GPT-2 has none, so its rules would encode text differently "
        "from this tokenizer",
        file, core::json_excerpt(*normalizer, 80)));
  }
  const auto pre_tokenizer = root.find("pre_tokenizer");
  if (pre_tokenizer == root.end() || pre_tokenizer->is_null()) return {};
  const auto field = [&](const char* name) {
    const auto found = pre_tokenizer->find(name);
    return found == pre_tokenizer->end() ? json() : *found;
  };
  if (!pre_tokenizer->is_object() || field("type") != "ByteLevel" ||
      field("add_prefix_space") == true || field("use_regex") == false) {
    return core::invalid_argument(fmt::format(
        "{} has the pre-tokenizer {}; only GPT-2's (ByteLevel, without add_prefix_space, with "
        "use_regex) is supported",
        file, core::json_excerpt(*pre_tokenizer, 120)));
  }
  return {};
}

}  // namespace

core::StatusOr<BpeVocabulary> load_vocab_and_merges(const std::string& vocab_path,
                                                    const std::string& merges_path) {
  VocabularyBuilder builder;
  const std::string vocab_where = fmt::format("'{}'", vocab_path);
  {
    auto vocab = read_json(vocab_path);
    if (!vocab.ok()) return vocab.status();
    if (auto added = builder.add_tokens(*vocab, vocab_where); !added.ok()) return added;
  }
  if (auto bytes = builder.check_byte_tokens(vocab_where); !bytes.ok()) return bytes;
  auto merges = read_file(merges_path);
  if (!merges.ok()) return merges.status();
  const std::string_view text = *merges;
  int64_t line_number = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (line.ends_with('\r')) line.remove_suffix(1);  // a file saved on Windows
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    const std::string where = fmt::format("'{}' line {}", merges_path, line_number);
    const auto pair = split_merge(line);
    if (!pair) {
      return core::invalid_argument(
          fmt::format("{}: {} is not two tokens separated by one space", where, json_quoted(line)));
    }
    if (auto added = builder.add_merge(pair->first, pair->second, where); !added.ok()) {
      return added;
    }
  }
  return std::move(builder).finish();
}

core::StatusOr<BpeVocabulary> load_tokenizer_json(const std::string& path) {
  auto root = read_json(path);
  if (!root.ok()) return root.status();
  const std::string file = fmt::format("'{}'", path);
  const auto model = root->find("model");
  if (!root->is_object() || model == root->end() || !model->is_object()) {
    return core::invalid_argument(fmt::format("{} has no \"model\" object", file));
  }
  if (const auto type = model->find("type"); type != model->end() && *type != "BPE") {
    return core::invalid_argument(fmt::format("{} holds a {} model; only BPE models are supported",
                                              file, core::json_excerpt(*type)));
  }
  if (auto rules = check_gpt2_text_rules(*root, file); !rules.ok()) return rules;

  VocabularyBuilder builder;
  const std::string vocab_where = file + " model.vocab";
  const auto vocab = model->find("vocab");
  if (vocab == model->end()) return core::invalid_argument(vocab_where + " is missing");
  if (auto added = builder.add_tokens(*vocab, vocab_where); !added.ok()) return added;

  if (const auto special = root->find("added_tokens"); special != root->end()) {
    if (!special->is_array()) {
      return core::invalid_argument(file + " added_tokens is not an array");
    }
    for (size_t i = 0; i < special->size(); ++i) {
      const json& token = (*special)[i];
      const std::string where = fmt::format("{} added_tokens[{}]", file, i);
      if (!token.is_object() || !token.contains("content") || !token["content"].is_string() ||
          !token.contains("id")) {
        return core::invalid_argument(where + " is not an object with \"content\" and \"id\"");
      }
      if (auto added = builder.add_token(token["content"].get<std::string>(), token["id"], where);
          !added.ok()) {
        return added;
      }
    }
  }

  if (auto bytes = builder.check_byte_tokens(vocab_where); !bytes.ok()) return bytes;

  const auto merges = model->find("merges");
  if (merges == model->end() || !merges->is_array()) {
    return core::invalid_argument(file + " model.merges is missing or not an array");
  }
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& merge = (*merges)[i];
    const std::string where = fmt::format("{} model.merges[{}]", file, i);
    std::optional<std::pair<std::string, std::string>> pair;
    if (merge.is_string()) {
      pair = split_merge(merge.get<std::string>());
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      pair = std::pair{merge[0].get<std::string>(), merge[1].get<std::string>()};
    }
    if (!pair) {
      return core::invalid_argument(
          fmt::format("{}: {} is neither \"left right\" nor [left, right]", where,
                      core::json_excerpt(merge, 80)));
    }
    if (auto added = builder.add_merge(pair->first, pair->second, where); !added.ok()) {
      return added;
    }
  }
  return std::move(builder).finish();
}

}  // namespace dslaunch::tools
