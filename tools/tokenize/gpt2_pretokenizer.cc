#include "tools/tokenize/gpt2_pretokenizer.h"

#include <array>
#include <string>

#include <fmt/format.h>

namespace dslaunch::tools {
namespace {

// Unicode's White_Space property, for \s in the pattern.
constexpr std::string_view kWhitespace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string gpt2_pattern() {
  return fmt::format(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{{L}}+| ?\p{{N}}+| ?[^{0}\p{{L}}\p{{N}}]+|[{0}]+(?![^{0}])|[{0}]+)",
      kWhitespace);
}

std::string pcre2_message(int code) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  pcre2_get_error_message(code, buffer.data(), buffer.size());
  return reinterpret_cast<const char*>(buffer.data());
}

bool is_utf8_error(int code) {
  return code <= PCRE2_ERROR_UTF8_ERR1 && code >= PCRE2_ERROR_UTF8_ERR21;
}

}  // namespace

void Gpt2Pretokenizer::CodeDeleter::operator()(pcre2_code* code) const { pcre2_code_free(code); }

core::StatusOr<Gpt2Pretokenizer> Gpt2Pretokenizer::create() {
  const std::string pattern = gpt2_pattern();
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (code == nullptr) {
    return core::internal_error(fmt::format("PCRE2 cannot compile GPT-2's pattern: {} at {}",
                                            pcre2_message(error), error_offset));
  }
  // Without a JIT, pcre2_match interprets the pattern: slower, same pieces.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return Gpt2Pretokenizer(std::unique_ptr<pcre2_code, CodeDeleter>(code));
}

core::Status Gpt2Pretokenizer::split(std::string_view text,
                                     const std::function<void(std::string_view)>& piece) const {
  const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code_.get(), nullptr), &pcre2_match_data_free);
  if (match == nullptr) return core::internal_error("out of memory for PCRE2's match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // The first call checks the whole text's UTF-8; checking again from each
  // later offset would make splitting quadratic.
  uint32_t options = 0;
  for (size_t offset = 0; offset < text.size(); options = PCRE2_NO_UTF_CHECK) {
    const int found =
        pcre2_match(code_.get(), subject, text.size(), offset, options, match.get(), nullptr);
    if (is_utf8_error(found)) {
      return core::invalid_argument(fmt::format("not valid UTF-8 at byte offset {} ({})",
                                                pcre2_get_startchar(match.get()),
                                                pcre2_message(found)));
    }
    if (found < 0) {
      return core::internal_error(
          fmt::format("PCRE2 failed at byte offset {}: {}", offset, pcre2_message(found)));
    }
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match.get());
    // Every character is a letter, a number, white space or none of these,
    // so a piece starts at every offset; Python's findall would drop a skipped
    // character, which would be a bug in the pattern.
    if (range[0] != offset || range[1] <= offset) {
      return core::internal_error(
          fmt::format("GPT-2's pattern matched nothing at byte offset {}", offset));
    }
    piece(text.substr(offset, range[1] - offset));
    offset = range[1];
  }
  return {};
}

}  // namespace dslaunch::tools
