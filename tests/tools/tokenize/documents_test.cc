// tokenize_text's documents: whole text files and JSON Lines.
#include "tools/tokenize/documents.h"

#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/temp_files.h"

namespace dslaunch::tools {
namespace {

using Catch::Matchers::Contains;
using dslaunch::testing::TempDir;
using dslaunch::testing::write_bytes;
using Visited = std::vector<std::pair<std::string, std::string>>;  // (text, place)

core::Status visit_all(const std::vector<std::string>& paths, std::string_view key,
                       Visited& visited) {
  return for_each_document(paths, key, [&](const Document& document) {
    visited.emplace_back(document.text, document.place());
    return core::Status();
  });
}

TEST_CASE("a text file is one document; a .jsonl file has one per line with text") {
  TempDir dir;
  write_bytes(dir.file("a.txt"), "first\n");
  write_bytes(dir.file("b.jsonl"),
              "{\"text\": \"one\"}\n"
              "\n"
              "{\"text\": \"\"}\n"
              "  \n"
              "{\"text\": \"two\\nlines \\u00e9\", \"id\": 3}\r\n"
              "{\"other\": 1, \"text\": \"three\"}");
  Visited visited;
  REQUIRE(visit_all({dir.file("a.txt"), dir.file("b.jsonl")}, "text", visited).ok());
  const std::string b = "'" + dir.file("b.jsonl") + "'";
  CHECK(visited == Visited{{"first\n", "'" + dir.file("a.txt") + "'"},
                           {"one", b + " line 1"},
                           {"two\nlines \u00e9", b + " line 5"},
                           {"three", b + " line 6"}});
}

TEST_CASE("the JSON Lines key can be another member") {
  TempDir dir;
  write_bytes(dir.file("c.jsonl"), "{\"content\": \"x\", \"text\": 5}\n");
  Visited visited;
  REQUIRE(visit_all({dir.file("c.jsonl")}, "content", visited).ok());
  CHECK(visited == Visited{{"x", "'" + dir.file("c.jsonl") + "' line 1"}});
}

TEST_CASE("bad input fails, naming the file and line") {
  TempDir dir;
  const auto fails_with = [&](const std::string& name, const std::string& content,
                              const std::string& message) {
    write_bytes(dir.file(name), content);
    Visited visited;
    const core::Status status = visit_all({dir.file(name)}, "text", visited);
    INFO(message);
    CHECK_FALSE(status.ok());
    CHECK_THAT(status.message(), Contains(message));
  };
  fails_with("empty.txt", "", "'" + dir.file("empty.txt") + "' is empty");
  fails_with("broken.jsonl", "{\"text\": \"a\"}\n{\"text\": \n",
             "'" + dir.file("broken.jsonl") + "' line 2 is not JSON");
  fails_with("no_key.jsonl", "{\"body\": \"a\"}\n",
             "'" + dir.file("no_key.jsonl") +
                 "' line 1 is not a JSON object with a string \"text\" (set the key with "
                 "--jsonl-key): {\"body\":\"a\"}");
  fails_with("number.jsonl", "{\"text\": 5}\n", "line 1 is not a JSON object with a string");
  fails_with("array.jsonl", "[\"text\"]\n", "line 1 is not a JSON object with a string");
  fails_with("blank.jsonl", "\n{\"text\": \"\"}\n",
             "'" + dir.file("blank.jsonl") + "' has no documents");
  Visited visited;
  const core::Status missing = visit_all({dir.file("absent.txt")}, "text", visited);
  CHECK_THAT(missing.message(), Contains("cannot open '" + dir.file("absent.txt") + "'"));
}

TEST_CASE("a visitor's failure stops the walk and is returned") {
  TempDir dir;
  write_bytes(dir.file("d.jsonl"), "{\"text\": \"a\"}\n{\"text\": \"b\"}\n");
  int calls = 0;
  const core::Status status =
      for_each_document({dir.file("d.jsonl")}, "text", [&](const Document& document) {
        ++calls;
        return core::invalid_argument(document.place() + ": refused");
      });
  CHECK(calls == 1);
  CHECK(status.message() == "'" + dir.file("d.jsonl") + "' line 1: refused");
}

}  // namespace
}  // namespace dslaunch::tools
