#include "proto/auth.h"

#include <sys/random.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "core/errno_status.h"

namespace dslaunch::proto {

TokenResult generate_token() {
  unsigned char bytes[kTokenBytes];
  size_t filled = 0;
  while (filled < sizeof bytes) {
    const ssize_t got = getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return {"",
              std::string("cannot make a job token: getrandom failed: ") + core::errno_text(errno)};
    }
    filled += static_cast<size_t>(got);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  token.reserve(2 * sizeof bytes);
  for (unsigned char byte : bytes) {
    token.push_back(kHex[byte >> 4]);
    token.push_back(kHex[byte & 0xf]);
  }
  return {token, ""};
}

std::string bearer_value(std::string_view token) {
  std::string value(kBearerPrefix);
  value.append(token);
  return value;
}

bool constant_time_equals(std::string_view a, std::string_view b) {
  // Lengths are not secret (every token has 64 characters); the contents are.
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  // The volatile read keeps the compiler from turning the loop into an early exit.
  volatile unsigned char result = difference;
  return result == 0;
}

bool authorization_matches(std::string_view metadata_value, std::string_view token) {
  if (token.empty()) return false;
  if (metadata_value.substr(0, kBearerPrefix.size()) != kBearerPrefix) return false;
  return constant_time_equals(metadata_value.substr(kBearerPrefix.size()), token);
}

bool read_credential_file(const std::string& path, std::string& contents, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot read: " + core::errno_text(errno);
    return false;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    error = path + ": read failed";
    return false;
  }
  contents = text.str();
  if (contents.empty()) {
    error = path + ": empty file; expected a PEM certificate or key";
    return false;
  }
  return true;
}

}  // namespace dslaunch::proto
