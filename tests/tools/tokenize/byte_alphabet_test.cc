// GPT-2's byte alphabet, against the characters GPT-2's own files use.
#include "tools/tokenize/byte_alphabet.h"

#include <catch2/catch.hpp>
#include <set>

namespace dslaunch::tools {
namespace {

TEST_CASE("printable bytes stand for themselves, the other 68 for U+0100 onwards") {
  CHECK(byte_character('!') == "!");
  CHECK(byte_character('A') == "A");
  CHECK(byte_character('~') == "~");
  CHECK(byte_character(0xE9) == "\u00E9");  // 'é' prints
  CHECK(byte_character(0x00) == "\u0100");  // the first byte that does not print
  CHECK(byte_character('\n') == "\u010A");  // 'Ċ', as in GPT-2's "ĊĊ"
  CHECK(byte_character(' ') == "\u0120");   // 'Ġ', as in GPT-2's "Ġthe"
  CHECK(byte_character(0x7F) == "\u0121");  // DEL follows the 33 below '!'
  CHECK(byte_character(0xAD) == "\u0143");  // the soft hyphen is the last
  std::set<std::string> characters;
  for (int byte = 0; byte < 256; ++byte)
    characters.insert(byte_character(static_cast<uint8_t>(byte)));
  CHECK(characters.size() == 256);
}

TEST_CASE("token_text_bytes undoes the alphabet") {
  std::string text;
  std::string bytes;
  for (int byte = 0; byte < 256; ++byte) {
    text += byte_character(static_cast<uint8_t>(byte));
    bytes.push_back(static_cast<char>(byte));
  }
  CHECK(token_text_bytes(text) == bytes);
  CHECK(token_text_bytes("\u0120the") == " the");
  CHECK(token_text_bytes("\u00C3\u00A9") == "\xC3\xA9");  // GPT-2's "Ã©" is 'é' in UTF-8
  CHECK(token_text_bytes("<|endoftext|>") == "<|endoftext|>");
}

TEST_CASE("a token with a character outside the alphabet stands for its own UTF-8") {
  CHECK(token_text_bytes("<\uFF5Cpad\uFF5C>") == "<\uFF5Cpad\uFF5C>");
  CHECK(token_text_bytes("\u0120\u65E5") == "\u0120\u65E5");  // not " " + something
}

}  // namespace
}  // namespace dslaunch::tools
