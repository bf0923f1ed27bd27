#include "worker/data/training_data.h"

#include <catch2/catch.hpp>
#include <vector>

#include "tests/worker/data/test_files.h"
#include "worker/data/demo_corpus.h"
#include "worker/data/llmc_token_file.h"

namespace dslaunch::worker::data {
namespace {

using Catch::Matchers::Contains;
using testing::TempDir;

void write_llmc(const std::string& path, int64_t count) {
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) tokens[i] = static_cast<uint16_t>(i % 50);
  std::string error;
  REQUIRE(write_llmc_token_file(path, tokens, error));
}

spec::DataSpec data_spec(std::string train, std::string valid = "") {
  spec::DataSpec spec;
  spec.train = std::move(train);
  spec.valid = std::move(valid);
  return spec;
}

TEST_CASE("data.train: demo opens the demo corpus with its own valid file") {
  TempDir dir;
  const TrainingData data = open_training_data(data_spec("demo"), 64, dir.path());
  REQUIRE(data.error.empty());
  const DemoCorpus corpus = ensure_demo_corpus(dir.path());
  CHECK_THAT(data.train_source->describe(), Contains(corpus.train_path));
  CHECK_THAT(data.valid_source->describe(), Contains(corpus.valid_path));
  CHECK(data.train.begin == 0);
  CHECK(data.train.end == data.train_source->size());
  CHECK(data.valid.end == data.valid_source->size());
  REQUIRE(data.unigram_entropy_nats.has_value());
  CHECK(*data.unigram_entropy_nats == corpus.unigram_entropy_nats);
}

TEST_CASE("Without data.valid, the last 3% of train is held out") {
  TempDir dir;
  write_llmc(dir.file("train.bin"), 10'000);
  const TrainingData data = open_training_data(data_spec(dir.file("train.bin")), 16, "");
  REQUIRE(data.error.empty());
  CHECK(data.valid_source == nullptr);
  CHECK(data.train.source == data.train_source.get());
  CHECK(data.valid.source == data.train_source.get());
  CHECK(data.train.end == 9'700);
  CHECK(data.valid.begin == 9'700);
  CHECK(data.valid.end == 10'000);
  CHECK_FALSE(data.unigram_entropy_nats.has_value());
}

TEST_CASE("A given data.valid is read whole") {
  TempDir dir;
  write_llmc(dir.file("train.bin"), 1'000);
  write_llmc(dir.file("valid.bin"), 100);
  const TrainingData data =
      open_training_data(data_spec(dir.file("train.bin"), dir.file("valid.bin")), 16, "");
  REQUIRE(data.error.empty());
  CHECK(data.train.size() == 1'000);
  CHECK(data.valid.size() == 100);
  CHECK(data.valid.source == data.valid_source.get());
}

TEST_CASE("Data errors name the key and the file") {
  TempDir dir;
  write_llmc(dir.file("train.bin"), 1'000);
  write_llmc(dir.file("tiny.bin"), 10);
  CHECK_THAT(open_training_data(data_spec(dir.file("absent")), 16, "").error,
             Contains("data.train: no token data at '" + dir.file("absent")));
  CHECK_THAT(
      open_training_data(data_spec(dir.file("train.bin"), dir.file("tiny.bin")), 16, "").error,
      Contains("data.valid: llm.c token file '" + dir.file("tiny.bin")) &&
          Contains("10 tokens, fewer than one window of model.seq_length + 1 = 17"));
  CHECK_THAT(open_training_data(data_spec(dir.file("tiny.bin")), 16, "").error,
             Contains("data.train: llm.c token file") && Contains("too small"));
  CHECK_THAT(open_training_data(data_spec("demo"), 16, "").error,
             Contains("data.train: no folder for the demo corpus"));
}

}  // namespace
}  // namespace dslaunch::worker::data
