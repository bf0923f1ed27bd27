// tokenize_text end to end: the binary on temporary files.
#include <catch2/catch.hpp>
#include <filesystem>
#include <vector>

#include "tests/support/run_command.h"
#include "tests/worker/data/test_files.h"
#include "worker/data/llmc_token_file.h"

namespace dslaunch::worker::data {
namespace {

using Catch::Matchers::Contains;
using dslaunch::testing::run_command;
using dslaunch::testing::runfile;
using testing::TempDir;

std::string tool() { return runfile("tools/tokenize/tokenize_text"); }

std::vector<int32_t> tokens_of(const std::string& path) {
  const auto opened = open_llmc_token_file(path);
  REQUIRE(opened.error.empty());
  std::vector<int32_t> tokens(static_cast<size_t>(opened.source->size()));
  opened.source->read(0, opened.source->size(), tokens.data());
  return tokens;
}

std::vector<int32_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

TEST_CASE("tokenize_text writes one token per byte, files separated by token 0") {
  TempDir dir;
  testing::write_bytes(dir.file("a.txt"), "Hi\n");
  testing::write_bytes(dir.file("b.txt"), "\xc3\xa9t\xc3\xa9");  // UTF-8 "été"
  const auto run = run_command(tool() + " " + dir.file("a.txt") + " " + dir.file("b.txt") +
                               " --out " + dir.file("out.bin"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.output, Contains("wrote 9 tokens to " + dir.file("out.bin")));
  CHECK(tokens_of(dir.file("out.bin")) ==
        std::vector<int32_t>{'H', 'i', '\n', 0, 0xc3, 0xa9, 't', 0xc3, 0xa9});
}

TEST_CASE("tokenize_text writes the last fraction of tokens to --valid-out") {
  TempDir dir;
  testing::write_bytes(dir.file("a.txt"), "abcdefghijklmnopqrst");
  const auto run = run_command(tool() + " " + dir.file("a.txt") + " --out " + dir.file("t.bin") +
                               " --valid-out " + dir.file("v.bin") + " --valid-fraction 0.25");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(tokens_of(dir.file("t.bin")) == bytes("abcdefghijklmno"));
  CHECK(tokens_of(dir.file("v.bin")) == bytes("pqrst"));
}

TEST_CASE("tokenize_text fails clearly on bad input and output") {
  TempDir dir;
  testing::write_bytes(dir.file("a.txt"), "text");
  testing::write_bytes(dir.file("empty.txt"), "");
  testing::write_bytes(dir.file("binary.txt"), std::string("ab\0c", 4));
  const std::string out = " --out " + dir.file("out.bin");
  const auto fails_with = [&](const std::string& arguments, const std::string& message) {
    const auto run = run_command(tool() + " " + arguments + " 2>&1");
    INFO(run.output);
    CHECK(run.exit_code != 0);
    CHECK_THAT(run.output, Contains(message));
  };
  fails_with(dir.file("absent.txt") + out,
             "cannot open '" + dir.file("absent.txt") + "': No such file or directory");
  fails_with(dir.file("empty.txt") + out, "'" + dir.file("empty.txt") + "' is empty");
  fails_with(dir.file("binary.txt") + out, "has a NUL byte at offset 2");
  fails_with(dir.file("a.txt") + " --out " + dir.file("no/such/dir/out.bin"),
             "cannot write '" + dir.file("no/such/dir/out.bin") + "'");
  fails_with(dir.file("a.txt") + out + " --valid-out " + dir.file("v.bin"),
             "--valid-out requires --valid-fraction");
  fails_with(
      dir.file("a.txt") + out + " --valid-out " + dir.file("v.bin") + " --valid-fraction 1.5",
      "between 0 and 1");
  fails_with(
      dir.file("a.txt") + out + " --valid-out " + dir.file("v.bin") + " --valid-fraction 0.01",
      "leaves the validation part empty");
  fails_with(out, "inputs is required");
  CHECK_FALSE(std::filesystem::exists(dir.file("out.bin")));
}

TEST_CASE("tokenize_text --help says how documents are separated") {
  const auto run = run_command(tool() + " --help");
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.output, Contains("separated by token 0") && Contains("NUL"));
}

}  // namespace
}  // namespace dslaunch::worker::data
