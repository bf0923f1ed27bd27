#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dslaunch::core {

// An IPv4 subnet in CIDR form ("198.51.100.0/24"), as Open MPI's
// btl_tcp_if_include and oob_tcp_if_include accept beside interface names.
struct Ipv4Subnet {
  uint32_t network = 0;  // host byte order, host bits cleared
  int prefix_length = 0;

  // "a.b.c.d/n" with n from 0 to 32; nullopt for anything else.
  static std::optional<Ipv4Subnet> parse(const std::string& text);
  // Whether the dotted-quad `ipv4` lies in the subnet (false when it is no
  // IPv4 address).
  bool contains(const std::string& ipv4) const;
};

// Whether `text` is meant as a subnet (it has a '/'), not an interface name.
bool looks_like_subnet(const std::string& text);

}  // namespace dslaunch::core
