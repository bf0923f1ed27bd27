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

namespace dslaunch::worker {
namespace {

namespace fs = std::filesystem;

constexpr int kFailed = 1;
constexpr int kBadInput = 2;
// A vocabulary this small is bytes: token i is the byte i, as the byte-level
// tokenizer (tools/tokenize) and the demo corpus write them.
constexpr int64_t kByteVocabulary = 256;
// Where a byte-level model starts when given no prompt: a new line, which
// starts a paragraph in the text such models learn from.
constexpr char kDefaultTextPrompt[] = "\n";

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

// The prompt's token ids, or nullopt with `error` set.
std::optional<std::vector<int32_t>> prompt_of(const GenerateOptions& options, int64_t vocab,
                                              std::string& error) {
  if (!options.prompt_tokens.empty()) {
    for (const int32_t token : options.prompt_tokens) {
      if (token < 0 || token >= vocab) {
        error = fmt::format("--prompt-tokens: {} is outside the model's vocabulary [0, {})", token,
                            vocab);
        return std::nullopt;
      }
    }
    return options.prompt_tokens;
  }
  if (vocab > kByteVocabulary) {
    error = "a prompt as text needs a byte-level model; pass --prompt-tokens";
    return std::nullopt;
  }
  const std::string& text = options.prompt.value_or(kDefaultTextPrompt);
  if (text.empty()) {
    error = "--prompt is empty: the model needs at least one token to continue";
    return std::nullopt;
  }
  std::vector<int32_t> tokens;
  for (const char c : text) {
    const int32_t byte = static_cast<unsigned char>(c);
    if (byte >= vocab) {
      error = fmt::format("--prompt holds byte 0x{:02X}, outside the model's vocabulary of {}",
                          byte, vocab);
      return std::nullopt;
    }
    tokens.push_back(byte);
  }
  return tokens;
}

std::string as_bytes(const std::vector<int32_t>& tokens) {
  std::string text;
  for (const int32_t token : tokens) text.push_back(static_cast<char>(token));
  return text;
}

// Prints tokens as they come: bytes as they are, ids separated by spaces.
class TokenPrinter {
 public:
  explicit TokenPrinter(bool bytes) : bytes_(bytes) {}
  void print(int32_t token) {
    if (bytes_) {
      std::cout.put(static_cast<char>(token));
    } else {
      std::cout << (first_ ? "" : " ") << token;
    }
    first_ = false;
    // Streamed: the reader sees each token as soon as it is drawn.
    std::cout.flush();
  }

 private:
  bool bytes_;
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
  const std::optional<std::vector<int32_t>> prompt = prompt_of(options, config.vocab_size, error);
  if (!prompt) {
    std::cerr << "dslaunch generate: " << error << "\n";
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
  const bool bytes = config.vocab_size <= kByteVocabulary;
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::unique_ptr<kernels::Backend> backend = kernels::make_cpu_backend(threads);
  const core::ParameterTable table(config);
  model::Gpt2Generator generator(table, *backend, loaded.params.data());

  TokenPrinter printer(bytes);
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
  std::vector<int32_t> all = *prompt;
  all.insert(all.end(), drawn.begin(), drawn.end());
  const nlohmann::json out{{"tokens", all},
                           {"prompt_length", prompt_length},
                           {"text", bytes ? nlohmann::json(as_bytes(all)) : nlohmann::json()}};
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
