#include "core/monitor/crc32c.h"

#include <string>

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

std::string bytes_from(int first, int step) {
  std::string bytes;
  for (int i = 0; i < 32; ++i) bytes += static_cast<char>(first + step * i);
  return bytes;
}

TEST_CASE("crc32c gives the published check value") {
  CHECK(crc32c("123456789") == 0xE3069283u);
  CHECK(crc32c("") == 0u);
}

// RFC 3720 (iSCSI), appendix B.4.
TEST_CASE("crc32c gives RFC 3720's values") {
  CHECK(crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  CHECK(crc32c(std::string(32, '\xFF')) == 0x62A8AB43u);
  CHECK(crc32c(bytes_from(0, 1)) == 0x46DD794Eu);
  CHECK(crc32c(bytes_from(31, -1)) == 0x113FDB5Cu);
}

}  // namespace
}  // namespace dslaunch::core
