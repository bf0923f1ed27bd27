#include "kernels/host_ranges.h"

#include <vector>

#include <catch2/catch.hpp>

namespace dslaunch::kernels {

TEST_CASE("HostRanges finds which copies touch a range held, at its edges") {
  std::vector<char> memory(100);
  char* base = memory.data();
  HostRanges ranges;
  REQUIRE(ranges.add(base + 10, 20));  // [10, 30)
  REQUIRE(ranges.add(base + 50, 10));  // [50, 60)
  CHECK(ranges.size() == 2);
  CHECK(ranges.bytes() == 30);
  CHECK_FALSE(ranges.touches(base, 10));       // ends where the first begins
  CHECK(ranges.touches(base, 11));             // its first byte
  CHECK(ranges.touches(base + 29, 1));         // its last byte
  CHECK_FALSE(ranges.touches(base + 30, 20));  // the gap between them
  CHECK(ranges.touches(base + 30, 21));        // reaches the second
  CHECK(ranges.touches(base, 100));            // spans both
  CHECK(ranges.touches(base + 55, 1));
  CHECK_FALSE(ranges.touches(base + 60, 40));  // after both
  CHECK_FALSE(ranges.touches(base + 20, 0));   // nothing
  // Overlaps and empty ranges are refused, on either side.
  CHECK_FALSE(ranges.add(base + 5, 6));
  CHECK_FALSE(ranges.add(base + 29, 21));
  CHECK_FALSE(ranges.add(base + 59, 10));
  CHECK_FALSE(ranges.add(base + 40, 0));
  CHECK(ranges.add(base + 30, 20));  // the gap exactly
  CHECK(ranges.size() == 3);
  CHECK(ranges.bytes() == 50);  // the refused ones not counted
  // Removed by its start only.
  CHECK_FALSE(ranges.remove(base + 11));
  CHECK(ranges.remove(base + 10));
  CHECK_FALSE(ranges.remove(base + 10));
  CHECK_FALSE(ranges.touches(base + 10, 20));
  CHECK(ranges.touches(base + 10, 21));
  CHECK(ranges.size() == 2);
  CHECK(ranges.bytes() == 30);
}

}  // namespace dslaunch::kernels
