#include "core/layout/range_set.h"

#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

TEST_CASE("a range set merges ranges that touch or overlap, in any order") {
  RangeSet set;
  CHECK(set.empty());
  CHECK(set.covers(5, 5));
  CHECK_FALSE(set.covers(0, 1));
  set.add(10, 20);
  set.add(30, 40);
  set.add(0, 5);
  CHECK(set.ranges() == Ranges{{0, 5}, {10, 20}, {30, 40}});
  set.add(20, 25);  // touches [10, 20)
  CHECK(set.ranges() == Ranges{{0, 5}, {10, 25}, {30, 40}});
  set.add(3, 35);  // bridges all three
  CHECK(set.ranges() == Ranges{{0, 40}});
  set.add(7, 7);  // empty: nothing
  set.add(50, 45);
  CHECK(set.ranges() == Ranges{{0, 40}});
  set.clear();
  CHECK(set.empty());
}

TEST_CASE("a range set covers a range only when one of its ranges holds all of it") {
  RangeSet set;
  set.add(0, 10);
  set.add(20, 30);
  CHECK(set.covers(0, 10));
  CHECK(set.covers(2, 8));
  CHECK(set.covers(20, 30));
  CHECK_FALSE(set.covers(5, 25));   // spans the gap
  CHECK_FALSE(set.covers(9, 11));   // runs past the end
  CHECK_FALSE(set.covers(15, 18));  // in the gap
  CHECK_FALSE(set.covers(29, 31));
  CHECK_FALSE(set.covers(-1, 1));
  set.add(10, 20);
  CHECK(set.covers(0, 30));
}

}  // namespace
}  // namespace dslaunch::core
