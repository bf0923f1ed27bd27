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
  spec.train_on(std::move(train));
  if (!valid.empty()) spec.valid = {std::move(valid)};
  return spec;
}

TEST_CASE("data.train: demo opens the demo corpus with its own valid file") {
  TempDir dir;
  const TrainingData data = open_training_data(data_spec("demo"), 64, dir.path());
  REQUIRE(data.error.empty());
  const DemoCorpus corpus = ensure_demo_corpus(dir.path());
  REQUIRE(data.train.size() == 1);
  CHECK_THAT(data.train[0].source->describe(), Contains(corpus.train_path));
  CHECK_THAT(data.valid.source->describe(), Contains(corpus.valid_path));
  CHECK(data.train[0].begin == 0);
  CHECK(data.train[0].end == data.train[0].source->size());
  CHECK(data.valid.end == data.valid.source->size());
  REQUIRE(data.unigram_entropy_nats.has_value());
  CHECK(*data.unigram_entropy_nats == corpus.unigram_entropy_nats);
}

TEST_CASE("Without data.valid, the last 3% of train is held out") {
  TempDir dir;
  write_llmc(dir.file("train.bin"), 10'000);
  const TrainingData data = open_training_data(data_spec(dir.file("train.bin")), 16, "");
  REQUIRE(data.error.empty());
  REQUIRE(data.train.size() == 1);
  CHECK(data.valid.source == data.train[0].source);
  CHECK(data.train[0].end == 9'700);
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
  REQUIRE(data.train.size() == 1);
  CHECK(data.train[0].size() == 1'000);
  CHECK(data.valid.size() == 100);
  CHECK(data.valid.source != data.train[0].source);
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

TEST_CASE("A list or a glob pattern is one dataset, its files read one after the other") {
  TempDir dir;
  write_llmc(dir.file("shard_000.bin"), 600);
  write_llmc(dir.file("shard_001.bin"), 400);
  write_llmc(dir.file("valid.bin"), 100);
  for (const std::vector<std::string>& paths :
       {std::vector<std::string>{dir.file("shard_000.bin"), dir.file("shard_001.bin")},
        std::vector<std::string>{dir.file("shard_*.bin")}}) {
    spec::DataSpec spec;
    spec.train = {{1, paths}};
    spec.valid = {dir.file("valid.bin")};
    const TrainingData data = open_training_data(spec, 16, "");
    REQUIRE(data.error.empty());
    REQUIRE(data.train.size() == 1);
    REQUIRE(data.train[0].size() == 1'000);
    // Token 600 is the second file's first: i % 50 restarts at 0 there.
    std::vector<int32_t> tokens(4);
    data.train[0].read(598, 4, tokens.data());
    CHECK(tokens == std::vector<int32_t>{598 % 50, 599 % 50, 0, 1});
  }
  spec::DataSpec none;
  none.train = {{1, {dir.file("nothing_*.bin")}}};
  CHECK_THAT(open_training_data(none, 16, "").error,
             Contains("data.train: no files match '" + dir.file("nothing_*.bin") + "'"));
}

TEST_CASE("A blend opens each dataset, and holds out 3% of each for evaluation") {
  TempDir dir;
  write_llmc(dir.file("a.bin"), 10'000);
  write_llmc(dir.file("b.bin"), 5'000);
  spec::DataSpec spec;
  spec.train = {{0.3, {dir.file("a.bin")}}, {0.7, {dir.file("b.bin")}}};
  const TrainingData data = open_training_data(spec, 16, "");
  REQUIRE(data.error.empty());
  REQUIRE(data.train.size() == 2);
  CHECK(data.weights == std::vector<double>{0.3, 0.7});
  CHECK(data.train[0].size() == 9'700);
  CHECK(data.train[1].size() == 4'850);
  CHECK(data.train_tokens() == 14'550);
  CHECK(data.valid.size() == 300 + 150);
}

}  // namespace
}  // namespace dslaunch::worker::data
