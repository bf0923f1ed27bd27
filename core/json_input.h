#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dslaunch::core {

// How deep arrays and objects may nest in any JSON dslaunch reads. Every real
// input (manifests, state.json, DeepSpeed configs, safetensors headers,
// config.json) stays under 10 levels; the cap keeps the recursive parts of
// nlohmann::json (dump, copy, comparison) far from the stack's end.
inline constexpr int kMaxJsonDepth = 64;

// Parses JSON that came from outside the process (a file, a header, an RPC).
// Never throws: on failure returns nullopt and sets `error` to one line that
// says what is wrong and where (a byte offset), without naming the source;
// callers prefix the file. Nesting deeper than `max_depth` is refused while
// parsing, before any deep value is built.
std::optional<nlohmann::json> parse_untrusted_json(std::string_view text, std::string& error,
                                                   int max_depth = kMaxJsonDepth);

// `value` as JSON text for an error message: at most `max_chars` characters
// (then "..."), control characters escaped as JSON escapes them.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 200);

}  // namespace dslaunch::core
