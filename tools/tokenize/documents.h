#pragma once

// The documents of tokenize_text's input files: a text file is one document;
// a file whose name ends in ".jsonl" (JSON Lines) holds one per line, the
// string under a key of each line's object.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dslaunch::tools {

inline constexpr std::string_view kJsonLinesSuffix = ".jsonl";

struct Document {
  std::string_view text;  // valid only during the visit
  std::string_view path;
  int64_t line = 0;  // the line of a JSON Lines document (from 1); 0 for a whole text file

  // Where the document is, for messages: "'a.txt'" or "'b.jsonl' line 3".
  std::string place() const;
};

using DocumentVisitor = std::function<core::Status(const Document&)>;

// Calls `visit` with each document of `paths`, in order, and stops at the
// first failure, which it returns. In a JSON Lines file, blank lines and
// lines whose text is "" are skipped (corpora hold both); every other line
// must be a JSON object whose `jsonl_key` member is a string. Fails, naming
// the file (and line), on a file that cannot be read, an empty text file, a
// JSON Lines file without a document, or a line that breaks those rules.
core::Status for_each_document(const std::vector<std::string>& paths, std::string_view jsonl_key,
                               const DocumentVisitor& visit);

}  // namespace dslaunch::tools
