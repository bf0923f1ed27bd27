#include "worker/data/demo_corpus.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "core/atomic_file.h"
#include "worker/data/demo_text.h"
#include "worker/data/llmc_token_file.h"
#include "core/mapped_file.h"

namespace dslaunch::worker::data {
namespace {

std::vector<uint16_t> byte_tokens(const std::string& text) {
  return std::vector<uint16_t>(reinterpret_cast<const uint8_t*>(text.data()),
                               reinterpret_cast<const uint8_t*>(text.data()) + text.size());
}

bool same_content(const std::string& path, const std::string& expected) {
  core::MappedFile file;
  std::string ignored;  // unreadable or absent: rewrite it
  return file.open(path, ignored) && file.size() == static_cast<int64_t>(expected.size()) &&
         std::memcmp(file.bytes(), expected.data(), expected.size()) == 0;
}

bool ensure_file(const std::string& path, const std::string& content, std::string& error) {
  if (same_content(path, content)) return true;
  return core::write_file_atomically(path, content, error);
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

}  // namespace

DemoCorpus ensure_demo_corpus(const std::string& dir) {
  if (dir.empty()) {
    return {"", "", 0, "no folder for the demo corpus: set DSL_DATA_CACHE, XDG_CACHE_HOME or HOME"};
  }
  std::error_code failure;
  std::filesystem::create_directories(dir, failure);
  if (failure) {
    return {"", "", 0,
            fmt::format("cannot create the demo corpus folder '{}': {}", dir, failure.message())};
  }
  const auto train_tokens = byte_tokens(generate_demo_text(kDemoTrainSeed, kDemoTrainBytes));
  const auto valid_tokens = byte_tokens(generate_demo_text(kDemoValidSeed, kDemoValidBytes));
  DemoCorpus corpus;
  corpus.train_path = fmt::format("{}/demo-v{}-train.bin", dir, kDemoCorpusVersion);
  corpus.valid_path = fmt::format("{}/demo-v{}-valid.bin", dir, kDemoCorpusVersion);
  std::string error;
  if (!ensure_file(corpus.train_path, llmc_token_file_bytes(train_tokens), error) ||
      !ensure_file(corpus.valid_path, llmc_token_file_bytes(valid_tokens), error)) {
    return {"", "", 0, fmt::format("cannot write the demo corpus: {}", error)};
  }
  corpus.unigram_entropy_nats = unigram_entropy_nats(train_tokens);
  return corpus;
}

std::string default_demo_dir() {
  if (const std::string cache = environment("DSL_DATA_CACHE"); !cache.empty()) return cache;
  if (const std::string xdg = environment("XDG_CACHE_HOME"); !xdg.empty()) {
    return xdg + "/dslaunch/data";
  }
  if (const std::string home = environment("HOME"); !home.empty()) {
    return home + "/.cache/dslaunch/data";
  }
  return "";
}

double unigram_entropy_nats(std::span<const uint16_t> tokens) {
  // Counted in token order, so the sum is the same on every run and machine.
  std::vector<int64_t> counts(65536, 0);
  for (const uint16_t token : tokens) ++counts[token];
  const double total = static_cast<double>(tokens.size());
  double entropy = 0;
  for (const int64_t count : counts) {
    if (count == 0) continue;
    const double p = static_cast<double>(count) / total;
    entropy -= p * std::log(p);
  }
  return entropy;
}

}  // namespace dslaunch::worker::data
