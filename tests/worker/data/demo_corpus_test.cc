#include "worker/data/demo_corpus.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "tests/worker/data/test_files.h"
#include "worker/data/demo_text.h"
#include "worker/data/llmc_token_file.h"

namespace dslaunch::worker::data {
namespace {

using Catch::Matchers::Contains;
using testing::TempDir;

uint64_t xxh64(const std::string& bytes) { return XXH64(bytes.data(), bytes.size(), 0); }

ino_t inode_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_ino;
}

std::vector<int32_t> tokens_of(const std::string& path) {
  const auto opened = open_llmc_token_file(path);
  REQUIRE(opened.error.empty());
  std::vector<int32_t> tokens(static_cast<size_t>(opened.source->size()));
  opened.source->read(0, opened.source->size(), tokens.data());
  return tokens;
}

TEST_CASE("The demo text is deterministic, fast and pinned") {
  const auto start = std::chrono::steady_clock::now();
  const std::string text = generate_demo_text(kDemoTrainSeed, kDemoTrainBytes);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 1.0);
  CHECK(text == generate_demo_text(kDemoTrainSeed, kDemoTrainBytes));
  CHECK(text != generate_demo_text(kDemoValidSeed, kDemoTrainBytes));
  CHECK(text.size() >= kDemoTrainBytes);
  CHECK(text.size() < kDemoTrainBytes + 1000);  // whole paragraphs, a few hundred bytes each
  CHECK(text.back() == '\n');
  CHECK(text.find('\0') == std::string::npos);
  // Pinned: a change to the grammar must raise kDemoCorpusVersion.
  CHECK(text.substr(0, 60) == "Clara has one ball. 6 and 1 make 7. 8 and 2 make 10. Clara h");
  CHECK(text.size() == 2'000'017);
  CHECK(xxh64(text) == 0x4465ab8e22102799);
  CHECK(xxh64(generate_demo_text(kDemoValidSeed, kDemoValidBytes)) == 0xb694ed514544e213);
}

TEST_CASE("unigram_entropy_nats is the entropy of the token frequencies") {
  const std::vector<uint16_t> two = {1, 1, 2, 2};
  CHECK(unigram_entropy_nats(two) == Approx(std::log(2.0)));
  const std::vector<uint16_t> one = {5, 5, 5};
  CHECK(unigram_entropy_nats(one) == 0.0);
  const std::vector<uint16_t> skewed = {0, 0, 0, 300};  // p = 3/4, 1/4
  CHECK(unigram_entropy_nats(skewed) == Approx(-(0.75 * std::log(0.75) + 0.25 * std::log(0.25))));
  CHECK(unigram_entropy_nats({}) == 0.0);
}

TEST_CASE("ensure_demo_corpus writes byte-token files and reports their entropy") {
  TempDir dir;
  const DemoCorpus corpus = ensure_demo_corpus(dir.path());
  REQUIRE(corpus.error.empty());
  CHECK(corpus.train_path == dir.file("demo-v1-train.bin"));
  CHECK(corpus.valid_path == dir.file("demo-v1-valid.bin"));

  const std::vector<int32_t> train = tokens_of(corpus.train_path);
  const std::vector<int32_t> valid = tokens_of(corpus.valid_path);
  const std::string text = generate_demo_text(kDemoTrainSeed, kDemoTrainBytes);
  REQUIRE(train.size() == text.size());
  CHECK(std::equal(train.begin(), train.end(), text.begin(),
                   [](int32_t token, char c) { return token == static_cast<uint8_t>(c); }));
  CHECK(valid.size() >= kDemoValidBytes);
  CHECK(valid.size() < kDemoValidBytes + 1000);
  for (const auto& tokens : {train, valid}) {
    CHECK(*std::min_element(tokens.begin(), tokens.end()) > 0);
    CHECK(*std::max_element(tokens.begin(), tokens.end()) < 128);
  }

  // The entropy, counted here independently from the file.
  std::map<int32_t, double> counts;
  for (const int32_t token : train) counts[token] += 1;
  double entropy = 0;
  for (const auto& [token, count] : counts) {
    const double p = count / static_cast<double>(train.size());
    entropy -= p * std::log(p);
  }
  CHECK(corpus.unigram_entropy_nats == Approx(entropy).epsilon(1e-12));
  CHECK(corpus.unigram_entropy_nats == Approx(3.02).margin(0.01));
}

TEST_CASE("ensure_demo_corpus keeps good files and rewrites damaged ones") {
  TempDir dir;
  const DemoCorpus first = ensure_demo_corpus(dir.path());
  REQUIRE(first.error.empty());
  const std::string train_bytes = testing::read_bytes(first.train_path);
  const std::string valid_bytes = testing::read_bytes(first.valid_path);
  const ino_t train_inode = inode_of(first.train_path);

  SECTION("intact files are left alone") {
    REQUIRE(ensure_demo_corpus(dir.path()).error.empty());
    CHECK(inode_of(first.train_path) == train_inode);
  }
  SECTION("a flipped byte, a truncation and a removal are repaired") {
    std::string damaged = train_bytes;
    damaged[5000] ^= 1;
    testing::write_bytes(first.train_path, damaged);
    testing::write_bytes(first.valid_path, valid_bytes.substr(0, 2000));
    REQUIRE(ensure_demo_corpus(dir.path()).error.empty());
    CHECK(testing::read_bytes(first.train_path) == train_bytes);
    CHECK(testing::read_bytes(first.valid_path) == valid_bytes);
    std::filesystem::remove(first.valid_path);
    REQUIRE(ensure_demo_corpus(dir.path()).error.empty());
    CHECK(testing::read_bytes(first.valid_path) == valid_bytes);
  }
  // Only the two files: no temporary file left behind.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()),
                      std::filesystem::directory_iterator()) == 2);
}

TEST_CASE("Concurrent callers all get the corpus") {
  TempDir dir;
  std::vector<DemoCorpus> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) {
    threads.emplace_back([&result, &dir] { result = ensure_demo_corpus(dir.file("cache")); });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& result : results) CHECK(result.error.empty());
  const std::string train = testing::read_bytes(results[0].train_path);
  CHECK(xxh64(train) ==
        xxh64(testing::read_bytes(ensure_demo_corpus(dir.path() + "/again").train_path)));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.file("cache")),
                      std::filesystem::directory_iterator()) == 2);
}

TEST_CASE("ensure_demo_corpus reports a folder it cannot create") {
  TempDir dir;
  testing::write_bytes(dir.file("a_file"), "x");
  const DemoCorpus corpus = ensure_demo_corpus(dir.file("a_file") + "/data");
  CHECK_THAT(corpus.error, Contains(dir.file("a_file") + "/data"));
  CHECK(corpus.train_path.empty());
  CHECK_THAT(ensure_demo_corpus("").error, Contains("DSL_DATA_CACHE"));
}

TEST_CASE("default_demo_dir follows DSL_DATA_CACHE, XDG_CACHE_HOME, then HOME") {
  const auto set = [](const char* name, const char* value) {
    if (value == nullptr) {
      ::unsetenv(name);
    } else {
      ::setenv(name, value, 1);
    }
  };
  set("DSL_DATA_CACHE", "/data/cache");
  set("XDG_CACHE_HOME", "/xdg");
  set("HOME", "/home/me");
  CHECK(default_demo_dir() == "/data/cache");
  set("DSL_DATA_CACHE", "");
  CHECK(default_demo_dir() == "/xdg/dslaunch/data");
  set("XDG_CACHE_HOME", nullptr);
  CHECK(default_demo_dir() == "/home/me/.cache/dslaunch/data");
  set("HOME", nullptr);
  CHECK(default_demo_dir() == "");
}

}  // namespace
}  // namespace dslaunch::worker::data
