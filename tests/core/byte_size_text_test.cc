#include "core/byte_size_text.h"

#include <cstdint>

#include <catch2/catch.hpp>

namespace dslaunch::core {

TEST_CASE("a size is written in the largest binary unit it reaches") {
  CHECK(byte_size_text(0) == "0 B");
  CHECK(byte_size_text(1023) == "1023 B");
  CHECK(byte_size_text(1024) == "1.0 KiB");
  CHECK(byte_size_text(1536) == "1.5 KiB");
  CHECK(byte_size_text((int64_t{1} << 20) - 1) == "1024.0 KiB");  // rounded, not promoted
  CHECK(byte_size_text(int64_t{1} << 20) == "1.0 MiB");
  CHECK(byte_size_text(int64_t{3} << 29) == "1.5 GiB");
  CHECK(byte_size_text(int64_t{5} << 40) == "5120.0 GiB");
}

}  // namespace dslaunch::core
