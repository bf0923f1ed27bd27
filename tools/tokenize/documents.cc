#include "tools/tokenize/documents.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "core/mapped_file.h"

namespace dslaunch::tools {
namespace {

bool only_blanks(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

core::Status visit_json_lines(const core::MappedFile& file, std::string_view jsonl_key,
                              const DocumentVisitor& visit) {
  const std::string_view text(reinterpret_cast<const char*>(file.bytes()),
                              static_cast<size_t>(file.size()));
  int64_t documents = 0;
  int64_t line_number = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (only_blanks(line)) continue;
    const Document place{{}, file.path(), line_number};
    std::string error;
    const auto object = core::parse_untrusted_json(line, error);
    if (!object) {
      return core::invalid_argument(fmt::format("{} is not JSON: {}", place.place(), error));
    }
    const auto value = object->is_object() ? object->find(jsonl_key) : object->end();
    if (value == object->end() || !value->is_string()) {
      return core::invalid_argument(
          fmt::format("{} is not a JSON object with a string \"{}\" (set the key with "
                      "--jsonl-key): {}",
                      place.place(), jsonl_key, core::json_excerpt(*object, 80)));
    }
    const std::string& document = value->get_ref<const std::string&>();
    if (document.empty()) continue;
    ++documents;
    if (auto visited = visit({document, file.path(), line_number}); !visited.ok()) return visited;
  }
  if (documents == 0) {
    return core::invalid_argument(fmt::format(
        "'{}' has no documents: no line has a non-empty \"{}\"", file.path(), jsonl_key));
  }
  return {};
}

}  // namespace

std::string Document::place() const {
  if (line == 0) return fmt::format("'{}'", path);
  return fmt::format("'{}' line {}", path, line);
}

core::Status for_each_document(const std::vector<std::string>& paths, std::string_view jsonl_key,
                               const DocumentVisitor& visit) {
  for (const std::string& path : paths) {
    core::MappedFile file;
    std::string error;
    if (!file.open(path, error)) return core::Status(core::StatusCode::kIoError, error);
    if (file.size() == 0) {
      return core::invalid_argument(
          fmt::format("'{}' is empty: there is nothing to tokenize", path));
    }
    if (path.ends_with(kJsonLinesSuffix)) {
      if (auto visited = visit_json_lines(file, jsonl_key, visit); !visited.ok()) return visited;
      continue;
    }
    const std::string_view text(reinterpret_cast<const char*>(file.bytes()),
                                static_cast<size_t>(file.size()));
    if (auto visited = visit({text, file.path(), 0}); !visited.ok()) return visited;
  }
  return {};
}

}  // namespace dslaunch::tools
