#include "worker/data/training_data.h"

#include <fmt/format.h>

#include "core/path_pattern.h"
#include "worker/data/concatenated_source.h"
#include "worker/data/demo_corpus.h"
#include "worker/data/held_out_split.h"
#include "worker/data/open_token_source.h"

namespace dslaunch::worker::data {
namespace {

TrainingData failed(std::string error) {
  TrainingData data;
  data.error = std::move(error);
  return data;
}

// "" when `range` holds a window of seq_len + 1 tokens, else why not.
std::string too_small(const char* key, const TokenRange& range, int64_t seq_len) {
  if (range.size() >= seq_len + 1) return "";
  return fmt::format(
      "data.{}: {} has {} tokens, fewer than one window of model.seq_length + 1 = {}", key,
      range.source->describe(), range.size(), seq_len + 1);
}

// Opens `paths` (patterns matched) into `data.sources` and returns the one
// source that reads them in order, or nullptr with `error` set.
const TokenSource* open_files(const char* key, const std::vector<std::string>& paths,
                              spec::DataFormat format, TrainingData& data, std::string& error) {
  std::vector<TokenRange> parts;
  for (const std::string& pattern : paths) {
    const std::vector<std::string> files = core::matching_paths(pattern);
    if (files.empty()) {
      error = fmt::format("data.{}: no files match '{}'", key, pattern);
      return nullptr;
    }
    for (const std::string& file : files) {
      TokenSourceResult opened = open_token_source(file, format);
      if (!opened.error.empty()) {
        error = fmt::format("data.{}: {}", key, opened.error);
        return nullptr;
      }
      parts.push_back(whole(*opened.source));
      data.sources.push_back(std::move(opened.source));
    }
  }
  if (parts.size() == 1) return parts.front().source;
  data.sources.push_back(std::make_unique<ConcatenatedSource>(std::move(parts)));
  return data.sources.back().get();
}

}  // namespace

int64_t TrainingData::train_tokens() const {
  int64_t tokens = 0;
  for (const TokenRange& range : train) tokens += range.size();
  return tokens;
}

TrainingData open_training_data(const spec::DataSpec& spec, int64_t seq_len,
                                const std::string& demo_dir) {
  TrainingData data;
  std::vector<spec::Dataset> datasets = spec.train;
  std::vector<std::string> valid_paths = spec.valid;
  spec::DataFormat train_format = spec.format;
  spec::DataFormat valid_format = spec.format;
  if (spec.demo()) {
    const DemoCorpus corpus = ensure_demo_corpus(demo_dir);
    if (!corpus.error.empty()) return failed("data.train: " + corpus.error);
    datasets = {{1, {corpus.train_path}}};
    train_format = spec::DataFormat::kLlmc;
    if (valid_paths.empty()) {
      valid_paths = {corpus.valid_path};
      valid_format = spec::DataFormat::kLlmc;
    }
    data.unigram_entropy_nats = corpus.unigram_entropy_nats;
  }
  if (datasets.empty()) return failed("data.train: no training data given");

  std::string error;
  std::vector<TokenRange> held_out;
  for (const spec::Dataset& dataset : datasets) {
    const TokenSource* source = open_files("train", dataset.paths, train_format, data, error);
    if (source == nullptr) return failed(error);
    data.weights.push_back(dataset.weight);
    if (!valid_paths.empty()) {
      data.train.push_back(whole(*source));
      continue;
    }
    const HeldOutSplit split = split_held_out(*source, seq_len);
    if (!split.error.empty()) return failed("data.train: " + split.error);
    data.train.push_back(split.train);
    held_out.push_back(split.valid);
  }
  if (valid_paths.empty()) {
    if (held_out.size() == 1) {
      data.valid = held_out.front();
    } else {
      data.sources.push_back(std::make_unique<ConcatenatedSource>(std::move(held_out)));
      data.valid = whole(*data.sources.back());
    }
    return data;
  }
  const TokenSource* valid = open_files("valid", valid_paths, valid_format, data, error);
  if (valid == nullptr) return failed(error);
  data.valid = whole(*valid);
  for (const TokenRange& range : data.train) {
    if (std::string problem = too_small("train", range, seq_len); !problem.empty()) {
      return failed(problem);
    }
  }
  if (std::string problem = too_small("valid", data.valid, seq_len); !problem.empty()) {
    return failed(problem);
  }
  return data;
}

}  // namespace dslaunch::worker::data
