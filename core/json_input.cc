#include "core/json_input.h"

#include <fmt/format.h>

namespace dslaunch::core {
namespace {

// Thrown from the parser's callback to abandon a too-deep document at once;
// caught below and never seen by callers.
struct TooDeep {};

}  // namespace

std::optional<nlohmann::json> parse_untrusted_json(std::string_view text, std::string& error,
                                                   int max_depth) {
  // nlohmann's parser itself keeps its stack on the heap; the callback sees the
  // depth of every value as it starts.
  const nlohmann::json::parser_callback_t limit_depth =
      [max_depth](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
        if ((event == nlohmann::json::parse_event_t::object_start ||
             event == nlohmann::json::parse_event_t::array_start) &&
            depth >= max_depth) {
          throw TooDeep{};
        }
        return true;
      };
  try {
    return nlohmann::json::parse(text, limit_depth);
  } catch (const TooDeep&) {
    error = fmt::format("arrays and objects nest deeper than {} levels", max_depth);
  } catch (const nlohmann::json::exception& parse_error) {
    error = parse_error.what();
  }
  return std::nullopt;
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  // Replace ill-formed UTF-8 rather than throw: the text only goes to a message.
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > max_chars) text = text.substr(0, max_chars) + "...";
  return text;
}

}  // namespace dslaunch::core
