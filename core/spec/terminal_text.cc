#include "core/spec/terminal_text.h"

#include <cstdint>

#include <fmt/format.h>

namespace dslaunch::spec {
namespace {

// The length of the valid UTF-8 sequence at the start of `text` and its code
// point, or 0 when it is not one (truncated, overlong, a surrogate, > U+10FFFF).
size_t utf8_sequence(std::string_view text, char32_t& code_point) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  size_t length = 0;
  char32_t minimum = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, minimum = 0x80, code_point = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, minimum = 0x800, code_point = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, minimum = 0x10000, code_point = lead & 0x07;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i) & 0x3f);
  }
  const bool surrogate = code_point >= 0xd800 && code_point <= 0xdfff;
  if (code_point < minimum || surrogate || code_point > 0x10ffff) return 0;
  return length;
}

bool is_hidden_control(char32_t code_point) {
  return (code_point >= 0x80 && code_point <= 0x9f) ||      // C1 controls
         (code_point >= 0x202a && code_point <= 0x202e) ||  // bidi embeddings, overrides
         (code_point >= 0x2066 && code_point <= 0x2069);    // bidi isolates
}

}  // namespace

std::string terminal_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const auto byte = static_cast<unsigned char>(text.front());
    if (byte >= 0x20 && byte < 0x7f) {
      out += text.front();
      text.remove_prefix(1);
      continue;
    }
    char32_t code_point = 0;
    const size_t length = byte >= 0x80 ? utf8_sequence(text, code_point) : 0;
    if (length > 0 && !is_hidden_control(code_point)) {
      out += text.substr(0, length);
    } else if (length > 0) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(code_point));
    } else if (byte == '\n') {
      out += "\\n";
    } else if (byte == '\r') {
      out += "\\r";
    } else if (byte == '\t') {
      out += "\\t";
    } else {
      out += fmt::format("\\x{:02x}", byte);
    }
    text.remove_prefix(length > 0 ? length : 1);
  }
  return out;
}

}  // namespace dslaunch::spec
