#include "tools/tokenize/byte_alphabet.h"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace dslaunch::tools {
namespace {

struct Alphabet {
  std::array<std::string, 256> characters;         // by byte
  std::unordered_map<std::string, uint8_t> bytes;  // the inverse
};

bool prints(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
         (byte >= 0xAE && byte <= 0xFF);
}

// Every character of the alphabet is below U+0144, so one or two UTF-8 bytes.
std::string utf8(char32_t code_point) {
  if (code_point < 0x80) return std::string(1, static_cast<char>(code_point));
  return {static_cast<char>(0xC0 | (code_point >> 6)),
          static_cast<char>(0x80 | (code_point & 0x3F))};
}

const Alphabet& alphabet() {
  static const Alphabet kAlphabet = [] {
    Alphabet built;
    char32_t next_substitute = 0x100;
    for (int byte = 0; byte < 256; ++byte) {
      built.characters[byte] = utf8(prints(byte) ? static_cast<char32_t>(byte) : next_substitute++);
      built.bytes.emplace(built.characters[byte], static_cast<uint8_t>(byte));
    }
    return built;
  }();
  return kAlphabet;
}

// The length of the UTF-8 sequence that `lead` starts; 1 for a stray byte, so
// that it is looked up alone (and not found).
size_t sequence_length(uint8_t lead) {
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace

const std::string& byte_character(uint8_t byte) { return alphabet().characters[byte]; }

std::string token_text_bytes(std::string_view text) {
  std::string bytes;
  for (size_t at = 0; at < text.size();) {
    const size_t length =
        std::min(sequence_length(static_cast<uint8_t>(text[at])), text.size() - at);
    const auto found = alphabet().bytes.find(std::string(text.substr(at, length)));
    if (found == alphabet().bytes.end()) return std::string(text);
    bytes.push_back(static_cast<char>(found->second));
    at += length;
  }
  return bytes;
}

}  // namespace dslaunch::tools
