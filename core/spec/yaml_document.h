#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "core/spec/diagnostics.h"

namespace dslaunch::spec {

// Parses `text` (the file at `path`) as one YAML document. A syntax error is
// reported at its line and column, and gives nullopt. A second document with
// content (after a '---') is an error at its start, since yaml-cpp's Load
// would drop it without a word; the first document is still returned, so its
// own problems are reported too. An empty second document (a trailing '---')
// loses nothing and is fine. An empty text gives a null node.
std::optional<YAML::Node> read_yaml_document(std::string_view text, const std::string& path,
                                             Diagnostics& diagnostics);

// How deep and how large a document read from outside may be. Every later walk
// of the tree (merging, reading keys, converting to JSON) recurses, and an
// alias is walked each time it is used, so the node count counts aliases as
// often as they appear: a few lines of nested aliases ("billion laughs") would
// otherwise expand to more nodes than memory or time allow.
inline constexpr int kMaxYamlDepth = 64;
inline constexpr int64_t kMaxYamlNodes = 1 << 20;

// "" when `root` is within the bounds above, else what is wrong ("nested
// deeper than 64 levels", "more than ... values"). Walks without recursion
// and stops at the first bound reached.
std::string yaml_shape_problem(const YAML::Node& root);

}  // namespace dslaunch::spec
