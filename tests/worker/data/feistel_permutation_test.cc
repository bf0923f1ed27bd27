#include "worker/data/feistel_permutation.h"

#include <catch2/catch.hpp>
#include <vector>

namespace dslaunch::worker::data {
namespace {

std::vector<uint64_t> images(const FeistelPermutation& permutation) {
  std::vector<uint64_t> out;
  for (uint64_t i = 0; i < permutation.size(); ++i) out.push_back(permutation(i));
  return out;
}

TEST_CASE("FeistelPermutation permutes [0, n) for any n") {
  for (const uint64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 100, 1000, 4097, 65536}) {
    for (const uint64_t key : {0, 1, 99}) {
      std::vector<int> hits(n, 0);
      for (const uint64_t image : images(FeistelPermutation(n, key))) {
        REQUIRE(image < n);
        ++hits[image];
      }
      INFO("n = " << n << ", key = " << key);
      CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
    }
  }
}

TEST_CASE("FeistelPermutation depends on its key and shuffles") {
  const auto a = images(FeistelPermutation(1000, 1));
  const auto b = images(FeistelPermutation(1000, 2));
  CHECK(a != b);
  CHECK(a == images(FeistelPermutation(1000, 1)));
  // Few fixed points and few neighbours kept adjacent: not near the identity
  // or a shift. A random permutation has about 1 of each on average.
  int fixed = 0;
  int adjacent = 0;
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    fixed += a[i] == i;
    adjacent += a[i + 1] == a[i] + 1;
  }
  CHECK(fixed < 10);
  CHECK(adjacent < 10);
}

}  // namespace
}  // namespace dslaunch::worker::data
