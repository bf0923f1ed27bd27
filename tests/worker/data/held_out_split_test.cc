#include "worker/data/held_out_split.h"

#include <catch2/catch.hpp>

#include "tests/worker/data/test_files.h"

namespace dslaunch::worker::data {
namespace {

using Catch::Matchers::Contains;
using testing::VectorSource;

TEST_CASE("The held-out split is the last 3% of tokens, rounded up") {
  const auto source = VectorSource::counting(10'000);
  const HeldOutSplit split = split_held_out(source, 16);
  REQUIRE(split.error.empty());
  CHECK(split.train.source == &source);
  CHECK(split.train.begin == 0);
  CHECK(split.train.end == 9'700);
  CHECK(split.valid.begin == 9'700);
  CHECK(split.valid.end == 10'000);

  const HeldOutSplit odd = split_held_out(VectorSource::counting(1'001), 4);
  CHECK(odd.valid.size() == 31);  // ceil(30.03)
}

TEST_CASE("The held-out split keeps at least one window of seq_len + 1") {
  const auto source = VectorSource::counting(1'000);
  const HeldOutSplit split = split_held_out(source, 64);  // 3% = 30 < 65
  REQUIRE(split.error.empty());
  CHECK(split.valid.size() == 65);
  CHECK(split.train.end == 935);
  CHECK(split.valid.begin == 935);
}

TEST_CASE("A source too small to split is an error") {
  const auto source = VectorSource::counting(100);
  const HeldOutSplit split = split_held_out(source, 64);
  CHECK(split.train.size() == 0);
  CHECK(split.valid.size() == 0);
  CHECK_THAT(split.error, Contains("test tokens is too small") && Contains("100 tokens") &&
                              Contains("= 65") && Contains("data.valid"));
}

}  // namespace
}  // namespace dslaunch::worker::data
