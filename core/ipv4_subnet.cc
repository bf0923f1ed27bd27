#include "core/ipv4_subnet.h"

#include <arpa/inet.h>

#include <charconv>

namespace dslaunch::core {
namespace {

std::optional<uint32_t> parse_address(const std::string& text) {
  in_addr address{};
  if (inet_pton(AF_INET, text.c_str(), &address) != 1) return std::nullopt;
  return ntohl(address.s_addr);
}

uint32_t mask_of(int prefix_length) {
  return prefix_length == 0 ? 0 : ~uint32_t{0} << (32 - prefix_length);
}

}  // namespace

std::optional<Ipv4Subnet> Ipv4Subnet::parse(const std::string& text) {
  const auto slash = text.find('/');
  if (slash == std::string::npos) return std::nullopt;
  const std::optional<uint32_t> address = parse_address(text.substr(0, slash));
  const char* first = text.data() + slash + 1;
  const char* last = text.data() + text.size();
  int length = -1;
  const auto [end, error] = std::from_chars(first, last, length);
  if (!address || first == last || error != std::errc() || end != last || length < 0 ||
      length > 32) {
    return std::nullopt;
  }
  return Ipv4Subnet{*address & mask_of(length), length};
}

bool Ipv4Subnet::contains(const std::string& ipv4) const {
  const std::optional<uint32_t> address = parse_address(ipv4);
  return address && (*address & mask_of(prefix_length)) == network;
}

bool looks_like_subnet(const std::string& text) { return text.find('/') != std::string::npos; }

}  // namespace dslaunch::core
