#include "core/shell_words.h"

#include <string_view>

namespace dslaunch::core {

std::optional<std::vector<std::string>> split_shell_words(const std::string& text,
                                                          std::string& error) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\\') {
      if (++i == text.size()) {
        error = "it ends with a backslash that escapes nothing";
        return std::nullopt;
      }
      word += text[i];
    } else if (c == '\'') {
      const size_t close = text.find('\'', i + 1);
      if (close == std::string::npos) {
        error = "a single quote at character " + std::to_string(i + 1) + " is never closed";
        return std::nullopt;
      }
      word.append(text, i + 1, close - i - 1);
      i = close;
    } else if (c == '"') {
      const size_t open = i;
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        const bool escape = text[i] == '\\' && i + 1 < text.size() &&
                            std::string_view("\"\\$`").find(text[i + 1]) != std::string::npos;
        if (escape) ++i;
        word += text[i];
      }
      if (i == text.size()) {
        error = "a double quote at character " + std::to_string(open + 1) + " is never closed";
        return std::nullopt;
      }
    } else {
      word += c;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace dslaunch::core
