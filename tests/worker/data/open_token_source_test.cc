#include "worker/data/open_token_source.h"

#include <catch2/catch.hpp>
#include <vector>

#include "tests/worker/data/test_files.h"
#include "worker/data/llmc_token_file.h"

namespace dslaunch::worker::data {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using spec::DataFormat;
using testing::append;
using testing::TempDir;

// A one-sequence uint16 Megatron dataset at `prefix`.
void write_megatron(const std::string& prefix, const std::vector<uint16_t>& tokens) {
  std::string bin;
  for (const uint16_t token : tokens) append(bin, token);
  std::string idx("MMIDIDX\0\0", 9);
  append(idx, uint64_t{1});
  append(idx, uint8_t{8});
  append(idx, uint64_t{1});
  append(idx, uint64_t{2});
  append(idx, static_cast<int32_t>(tokens.size()));
  append(idx, int64_t{0});
  append(idx, int64_t{0});
  append(idx, int64_t{1});
  testing::write_bytes(prefix + ".bin", bin);
  testing::write_bytes(prefix + ".idx", idx);
}

void write_llmc(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::string error;
  REQUIRE(write_llmc_token_file(path, tokens, error));
}

TEST_CASE("Auto-detection tells llm.c files from Megatron datasets") {
  TempDir dir;
  write_llmc(dir.file("train.bin"), {1, 2, 3});
  write_megatron(dir.file("mega"), {4, 5});

  SECTION("an llm.c file, even one named .bin") {
    const auto opened = open_token_source(dir.file("train.bin"), DataFormat::kAuto);
    REQUIRE(opened.error.empty());
    CHECK_THAT(opened.source->describe(), StartsWith("llm.c token file"));
    CHECK(opened.source->size() == 3);
  }
  SECTION("a Megatron prefix, or either file of the pair") {
    for (const char* name : {"mega", "mega.bin", "mega.idx"}) {
      const auto opened = open_token_source(dir.file(name), DataFormat::kAuto);
      REQUIRE(opened.error.empty());
      CHECK_THAT(opened.source->describe(),
                 StartsWith("Megatron dataset") && Contains(dir.file("mega") + "'"));
      CHECK(opened.source->size() == 2);
    }
  }
  SECTION("nothing there: the error lists what was tried") {
    const auto opened = open_token_source(dir.file("absent.bin"), DataFormat::kAuto);
    CHECK(opened.source == nullptr);
    CHECK_THAT(opened.error, Contains("no token data at '" + dir.file("absent.bin") + "'") &&
                                 Contains("llm.c token file at '" + dir.file("absent.bin") +
                                          "' (no such file)") &&
                                 Contains("'" + dir.file("absent.bin") + ".bin' + '" +
                                          dir.file("absent.bin") + ".idx' (neither exists)") &&
                                 Contains("'" + dir.file("absent") + ".bin' + '" +
                                          dir.file("absent") + ".idx' (neither exists)"));
  }
  SECTION("a file without the magic and half a Megatron pair") {
    testing::write_bytes(dir.file("half.bin"), "not tokens");
    const auto opened = open_token_source(dir.file("half.bin"), DataFormat::kAuto);
    CHECK(opened.source == nullptr);
    CHECK_THAT(opened.error, Contains("its first int32 is not the llm.c magic number 20240520") &&
                                 Contains("'" + dir.file("half") + ".idx' is missing"));
  }
}

TEST_CASE("An explicit format opens only that format") {
  TempDir dir;
  write_llmc(dir.file("train.bin"), {1, 2, 3});
  write_megatron(dir.file("mega"), {4, 5});
  CHECK(open_token_source(dir.file("train.bin"), DataFormat::kLlmc).error.empty());
  CHECK(open_token_source(dir.file("mega"), DataFormat::kMegatron).error.empty());
  CHECK(open_token_source(dir.file("mega.idx"), DataFormat::kMegatron).error.empty());
  CHECK_THAT(open_token_source(dir.file("mega.bin"), DataFormat::kLlmc).error,
             Contains("is not an llm.c token file"));
  CHECK_THAT(open_token_source(dir.file("train"), DataFormat::kMegatron).error,
             Contains(dir.file("train") + ".idx") && Contains("No such file"));
}

}  // namespace
}  // namespace dslaunch::worker::data
