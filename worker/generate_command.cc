#include "worker/generate_command.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/weights/hf_gpt2.h"
#include "kernels/backend.h"
#include "worker/token_text.h"

namespace dslaunch::worker {
namespace {

namespace fs = std::filesystem;

constexpr int kFailed = 1;
constexpr int kBadInput = 2;
// A vocabulary this small is bytes: token i is the byte i, as the byte-level
// tokenizer (tools/tokenize) and the demo corpus write them.
constexpr int64_t kByteVocabulary = 256;

// The safetensors file `weights` names: itself, or inside a folder a job's
// final weights (weights/model.safetensors) or a model.safetensors; "" with
// `error` set for a folder that holds neither.
std::string weights_file(const std::string& weights, std::string& error) {
  if (!fs::is_directory(weights)) return weights;
  for (const fs::path& candidate : {fs::path(weights) / "weights" / "model.safetensors",
                                    fs::path(weights) / "model.safetensors"}) {
    if (fs::is_regular_file(candidate)) return candidate.string();
  }
  error = fmt::format(
      "{} holds neither weights/model.safetensors (a finished job's weights) nor "
      "model.safetensors; `dslaunch export` writes them from a job's checkpoint",
      weights);
  return "";
}

// How this model's prompt and output are text: the tokenizer given, the
// bytes of a byte-level model, the tokenizer beside the weights, or none.
core::StatusOr<TokenText> token_text_for(const GenerateOptions& options,
                                         const std::string& weights, int64_t vocab) {
  if (!options.tokenizer_json.empty() && (!options.vocab.empty() || !options.merges.empty())) {
    return core::invalid_argument("give --tokenizer, or --vocab with --merges, not both");
  }
  if (options.vocab.empty() != options.merges.empty()) {
    return core::invalid_argument("--vocab and --merges go together");
  }
  if (!options.tokenizer_json.empty() || !options.vocab.empty()) {
    return load_bpe_text({options.tokenizer_json, options.vocab, options.merges}, vocab);
  }
  if (vocab <= kByteVocabulary) return TokenText::bytes(vocab);
  if (const auto beside = tokenizer_files_in(fs::path(weights).parent_path().string())) {
    return load_bpe_text(*beside, vocab);
  }
  return TokenText::ids_only();
}

// The prompt's token ids, or the reason there are none.
core::StatusOr<std::vector<int32_t>> prompt_of(const GenerateOptions& options, TokenText& text,
                                               int64_t vocab) {
  if (!options.prompt_tokens.empty()) {
    for (const int32_t token : options.prompt_tokens) {
      if (token < 0 || token >= vocab) {
        return core::invalid_argument(fmt::format(
            "--prompt-tokens: {} is outside the model's vocabulary [0, {})", token, vocab));
      }
    }
    return options.prompt_tokens;
  }
  if (!options.prompt) {
    if (auto start = text.default_prompt()) return std::move(*start);
    return core::invalid_argument(
        text.has_text()
            ? "--prompt is needed: the tokenizer has no <|endoftext|> to start from"
            : "give --prompt-tokens: the model's vocabulary is not bytes, and no tokenizer is "
              "given or beside the weights (--tokenizer, or --vocab with --merges)");
  }
  if (options.prompt->empty()) {
    return core::invalid_argument(
        "--prompt is empty: the model needs at least one token to continue");
  }
  core::StatusOr<std::vector<int32_t>> tokens = text.encode(*options.prompt);
  if (!tokens.ok()) return tokens.status().with_context("--prompt");
  return tokens;
}

// Prints tokens as they come: as text, or ids separated by spaces.
class TokenPrinter {
 public:
  explicit TokenPrinter(const TokenText& text) : text_(text) {}
  void print(int32_t token) {
    if (text_.has_text()) {
      std::cout << text_.decode(token);
    } else {
      std::cout << (first_ ? "" : " ") << token;
    }
    first_ = false;
    // Streamed: the reader sees each token as soon as it is drawn.
    std::cout.flush();
  }

 private:
  const TokenText& text_;
  bool first_ = true;
};

int generate(const GenerateOptions& options) {
  std::optional<model::TokenSampler> sampler;
  try {
    sampler.emplace(options.sampling);
  } catch (const std::invalid_argument& bad) {  // --temperature or --top-k
    std::cerr << "dslaunch generate: " << bad.what() << "\n";
    return kBadInput;
  }
  std::string error;
  const std::string path = weights_file(options.weights, error);
  if (path.empty()) {
    std::cerr << "dslaunch generate: " << error << "\n";
    return kBadInput;
  }
  const core::HfGpt2Weights loaded = core::load_hf_gpt2(path, options.num_heads, 1);
  if (!loaded.error.empty()) {
    std::cerr << "dslaunch generate: " << loaded.error << "\n";
    return kBadInput;
  }
  const core::Gpt2Config& config = loaded.config;
  core::StatusOr<TokenText> text = token_text_for(options, path, config.vocab_size);
  if (!text.ok()) {
    std::cerr << "dslaunch generate: " << text.status().message() << "\n";
    return kBadInput;
  }
  core::StatusOr<std::vector<int32_t>> prompt = prompt_of(options, *text, config.vocab_size);
  if (!prompt.ok()) {
    std::cerr << "dslaunch generate: " << prompt.status().message() << "\n";
    return kBadInput;
  }
  const auto prompt_length = static_cast<int64_t>(prompt->size());
  if (prompt_length >= config.max_seq_len) {
    std::cerr << fmt::format(
        "dslaunch generate: the prompt's {} tokens fill the model's context of {}, leaving no "
        "room to generate; shorten it\n",
        prompt_length, config.max_seq_len);
    return kBadInput;
  }
  if (options.tokens && *options.tokens < 0) {
    std::cerr << "dslaunch generate: --tokens must be at least 0\n";
    return kBadInput;
  }
  const int64_t room = config.max_seq_len - prompt_length;
  const int64_t wanted = options.tokens.value_or(room);
  if (wanted > room) {
    std::cerr << fmt::format(
        "dslaunch generate: the model's context holds {} tokens: {} new after the prompt's {}, "
        "not {}\n",
        config.max_seq_len, room, prompt_length, wanted);
  }
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::unique_ptr<kernels::Backend> backend = kernels::make_cpu_backend(threads);
  const core::ParameterTable table(config);
  model::Gpt2Generator generator(table, *backend, loaded.params.data());

  TokenPrinter printer(*text);
  model::TokenCallback on_token;
  if (!options.json) {
    for (const int32_t token : *prompt) printer.print(token);
    on_token = [&](int32_t token) { printer.print(token); };
  }
  const std::vector<int32_t> drawn =
      model::generate(generator, *sampler, *prompt, std::min(wanted, room), on_token);
  if (!options.json) {
    std::cout << "\n";
    return 0;
  }
  std::vector<int32_t> all = prompt.value();
  all.insert(all.end(), drawn.begin(), drawn.end());
  std::string decoded;
  for (const int32_t token : all) decoded += text->decode(token);
  const nlohmann::json out{{"tokens", all},
                           {"prompt_length", prompt_length},
                           {"text", text->has_text() ? nlohmann::json(decoded) : nlohmann::json()}};
  std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}

}  // namespace

int run_generate_command(const GenerateOptions& options) {
  try {
    return generate(options);
  } catch (const std::exception& error) {
    std::cerr << "dslaunch generate: " << error.what() << "\n";
    return kFailed;
  }
}

}  // namespace dslaunch::worker
