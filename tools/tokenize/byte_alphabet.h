#pragma once

// GPT-2's byte alphabet (bytes_to_unicode in OpenAI's encoder.py). GPT-2
// writes each token as text, one printable character per byte, so that
// vocab.json and merges.txt hold no spaces or control characters: the 188
// bytes that print ('!' to '~', U+00A1 to U+00AC, U+00AE to U+00FF) stand for
// themselves, and the other 68, in byte order, become U+0100, U+0101, ...
// (space is 'Ġ' U+0120, newline 'Ċ' U+010A). All functions are thread-safe.

#include <cstdint>
#include <string>
#include <string_view>

namespace dslaunch::tools {

// The UTF-8 text of the character that stands for `byte`.
const std::string& byte_character(uint8_t byte);

// The bytes that a token's text stands for. A text with a character outside
// the alphabet (a special token such as "<｜pad｜>") stands for its own UTF-8,
// as in Hugging Face's ByteLevel decoder.
std::string token_text_bytes(std::string_view text);

}  // namespace dslaunch::tools
