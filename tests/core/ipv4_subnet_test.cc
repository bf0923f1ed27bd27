#include "core/ipv4_subnet.h"

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

TEST_CASE("an IPv4 subnet parses in CIDR form and holds exactly its addresses") {
  const std::optional<Ipv4Subnet> subnet = Ipv4Subnet::parse("198.51.100.77/24");
  REQUIRE(subnet);
  CHECK(subnet->prefix_length == 24);
  CHECK(subnet->network == 0xC6336400u);  // host bits cleared
  CHECK(subnet->contains("198.51.100.0"));
  CHECK(subnet->contains("198.51.100.255"));
  CHECK_FALSE(subnet->contains("198.51.101.1"));
  CHECK_FALSE(subnet->contains("198.51.99.255"));
  CHECK_FALSE(subnet->contains("not an address"));

  CHECK(Ipv4Subnet::parse("0.0.0.0/0")->contains("203.0.113.9"));
  const std::optional<Ipv4Subnet> one = Ipv4Subnet::parse("10.0.0.5/32");
  CHECK(one->contains("10.0.0.5"));
  CHECK_FALSE(one->contains("10.0.0.4"));
  CHECK(Ipv4Subnet::parse("10.0.0.4/31")->contains("10.0.0.5"));
}

TEST_CASE("what is no IPv4 subnet is refused") {
  for (const char* text :
       {"eth0", "10.0.0.0", "10.0.0.0/", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/8x", "10.0.0/8",
        "300.0.0.0/8", "/8", "10.0.0.0/ 8", "fd00::/8"}) {
    CAPTURE(text);
    CHECK_FALSE(Ipv4Subnet::parse(text));
  }
  CHECK(looks_like_subnet("10.0.0.0/8"));
  CHECK_FALSE(looks_like_subnet("eth0"));
}

}  // namespace
}  // namespace dslaunch::core
