#include "worker/data/llmc_token_file.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <vector>

#include "tests/worker/data/test_files.h"

namespace dslaunch::worker::data {
namespace {

using Catch::Matchers::Contains;
using testing::append;
using testing::TempDir;

// A token file written by hand, byte by byte, as llm.c lays it out.
std::string token_file(int32_t magic, int32_t version, int32_t count,
                       const std::vector<uint16_t>& tokens) {
  std::string bytes;
  append(bytes, magic);
  append(bytes, version);
  append(bytes, count);
  bytes.resize(1024, '\0');
  for (const uint16_t token : tokens) append(bytes, token);
  return bytes;
}

std::vector<int32_t> read_all(const TokenSource& source) {
  std::vector<int32_t> out(static_cast<size_t>(source.size()));
  source.read(0, source.size(), out.data());
  return out;
}

TEST_CASE("write_llmc_token_file writes llm.c's layout and reads back") {
  TempDir dir;
  const std::string path = dir.file("tokens.bin");
  const std::vector<uint16_t> tokens = {7, 0, 65535, 256, 42, 1};
  std::string error;
  REQUIRE(write_llmc_token_file(path, tokens, error));
  CHECK(testing::read_bytes(path) == token_file(20240520, 1, 6, tokens));
  // Only the file itself: the temporary file was renamed over it.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()),
                      std::filesystem::directory_iterator()) == 1);

  const auto opened = open_llmc_token_file(path);
  REQUIRE(opened.error.empty());
  CHECK(opened.source->size() == 6);
  CHECK(opened.source->max_token() == 65535);
  CHECK(read_all(*opened.source) == std::vector<int32_t>{7, 0, 65535, 256, 42, 1});
  std::vector<int32_t> middle(3);
  opened.source->read(2, 3, middle.data());
  CHECK(middle == std::vector<int32_t>{65535, 256, 42});
  CHECK_THAT(opened.source->describe(), Contains(path) && Contains("6 tokens"));
}

TEST_CASE("A token file with no tokens opens empty") {
  TempDir dir;
  const std::string path = dir.file("empty.bin");
  testing::write_bytes(path, token_file(20240520, 1, 0, {}));
  const auto opened = open_llmc_token_file(path);
  REQUIRE(opened.error.empty());
  CHECK(opened.source->size() == 0);
  CHECK(opened.source->max_token() == -1);
}

TEST_CASE("Bad llm.c token files are refused with what was expected") {
  TempDir dir;
  const std::string path = dir.file("bad.bin");
  const auto error_for = [&](const std::string& bytes) {
    testing::write_bytes(path, bytes);
    const auto opened = open_llmc_token_file(path);
    CHECK(opened.source == nullptr);
    CHECK_THAT(opened.error, Contains(path));
    return opened.error;
  };

  SECTION("shorter than the header") {
    CHECK_THAT(error_for(std::string(100, '\0')),
               Contains("100 bytes") && Contains("1024-byte header"));
  }
  SECTION("wrong magic number") {
    CHECK_THAT(error_for(token_file(12345, 1, 2, {1, 2})),
               Contains("first int32 is 12345") && Contains("magic number 20240520"));
  }
  SECTION("unsupported version") {
    CHECK_THAT(error_for(token_file(20240520, 2, 2, {1, 2})),
               Contains("version 2 is not supported") && Contains("expected version 1"));
  }
  SECTION("negative token count") {
    CHECK_THAT(error_for(token_file(20240520, 1, -5, {})), Contains("token count is -5"));
  }
  SECTION("truncated: fewer tokens than the header says") {
    CHECK_THAT(error_for(token_file(20240520, 1, 5, {1, 2, 3})),
               Contains("truncated") && Contains("says 5 tokens") && Contains("1034 bytes") &&
                   Contains("has 1030 bytes"));
  }
  SECTION("more bytes than the header's count") {
    CHECK_THAT(error_for(token_file(20240520, 1, 2, {1, 2, 3})), Contains("has 1030 bytes") &&
                                                                     Contains("says 2 tokens") &&
                                                                     Contains("does not match"));
  }
}

TEST_CASE("A missing token file is an error naming it") {
  const auto opened = open_llmc_token_file("/nonexistent/tokens.bin");
  CHECK(opened.source == nullptr);
  CHECK_THAT(opened.error,
             Contains("/nonexistent/tokens.bin") && Contains("No such file or directory"));
}

TEST_CASE("has_llmc_magic reads the first int32") {
  TempDir dir;
  testing::write_bytes(dir.file("good.bin"), token_file(20240520, 1, 0, {}));
  testing::write_bytes(dir.file("other.bin"), token_file(1, 1, 0, {}));
  testing::write_bytes(dir.file("short.bin"), "ab");
  CHECK(has_llmc_magic(dir.file("good.bin")));
  CHECK_FALSE(has_llmc_magic(dir.file("other.bin")));
  CHECK_FALSE(has_llmc_magic(dir.file("short.bin")));
  CHECK_FALSE(has_llmc_magic(dir.file("absent.bin")));
}

TEST_CASE("write_llmc_token_file reports a folder it cannot write to") {
  std::string error;
  const std::vector<uint16_t> tokens = {1, 2};
  CHECK_FALSE(write_llmc_token_file("/nonexistent/folder/tokens.bin", tokens, error));
  CHECK_THAT(error, Contains("/nonexistent/folder/tokens.bin") && Contains("No such file"));
}

}  // namespace
}  // namespace dslaunch::worker::data
