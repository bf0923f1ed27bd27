#include "worker/data/training_data.h"

#include <fmt/format.h>

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

}  // namespace

TrainingData open_training_data(const spec::DataSpec& spec, int64_t seq_len,
                                const std::string& demo_dir) {
  TrainingData data;
  std::string train_path = spec.train;
  std::string valid_path = spec.valid;
  spec::DataFormat train_format = spec.format;
  spec::DataFormat valid_format = spec.format;
  if (spec.train == "demo") {
    const DemoCorpus corpus = ensure_demo_corpus(demo_dir);
    if (!corpus.error.empty()) return failed("data.train: " + corpus.error);
    train_path = corpus.train_path;
    train_format = spec::DataFormat::kLlmc;
    if (valid_path.empty()) {
      valid_path = corpus.valid_path;
      valid_format = spec::DataFormat::kLlmc;
    }
    data.unigram_entropy_nats = corpus.unigram_entropy_nats;
  }

  TokenSourceResult train = open_token_source(train_path, train_format);
  if (!train.error.empty()) return failed("data.train: " + train.error);
  data.train_source = std::move(train.source);

  if (valid_path.empty()) {
    const HeldOutSplit split = split_held_out(*data.train_source, seq_len);
    if (!split.error.empty()) return failed("data.train: " + split.error);
    data.train = split.train;
    data.valid = split.valid;
    return data;
  }
  TokenSourceResult valid = open_token_source(valid_path, valid_format);
  if (!valid.error.empty()) return failed("data.valid: " + valid.error);
  data.valid_source = std::move(valid.source);
  data.train = whole(*data.train_source);
  data.valid = whole(*data.valid_source);
  for (const auto& problem :
       {too_small("train", data.train, seq_len), too_small("valid", data.valid, seq_len)}) {
    if (!problem.empty()) return failed(problem);
  }
  return data;
}

}  // namespace dslaunch::worker::data
