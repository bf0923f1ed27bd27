#include "kernels/memory_reclaimers.h"

#include <optional>
#include <string>
#include <utility>

#include <catch2/catch.hpp>

namespace dslaunch::kernels {

TEST_CASE("reclaim_all asks every registered holder and sums what they gave back") {
  MemoryReclaimers reclaimers;
  CHECK(reclaimers.reclaim_all() == 0);
  std::string asked;
  int64_t held_a = 4 << 20;
  int64_t held_b = 2 << 20;
  const auto give_back = [&asked](int64_t& held, char name) {
    return [&asked, &held, name] {
      asked += name;
      return std::exchange(held, 0);
    };
  };
  MemoryReclaimers::Registration a = reclaimers.add(give_back(held_a, 'a'));
  MemoryReclaimers::Registration b = reclaimers.add(give_back(held_b, 'b'));
  CHECK(reclaimers.reclaim_all() == (6 << 20));
  CHECK(asked == "ab");
  CHECK(held_a == 0);
  // Asked again, nothing is left to give.
  CHECK(reclaimers.reclaim_all() == 0);
  CHECK(asked == "abab");
}

TEST_CASE("a holder is asked only while its registration lives, wherever it was moved") {
  MemoryReclaimers reclaimers;
  int asked = 0;
  std::optional<MemoryReclaimers::Registration> kept;
  {
    MemoryReclaimers::Registration first = reclaimers.add([&asked] {
      ++asked;
      return int64_t{1};
    });
    kept.emplace(std::move(first));
  }  // the moved-from registration removes nothing
  CHECK(reclaimers.reclaim_all() == 1);
  CHECK(asked == 1);
  MemoryReclaimers::Registration other = reclaimers.add([] { return int64_t{10}; });
  CHECK(reclaimers.reclaim_all() == 11);
  // Assigned over, a registration gives up the one it held.
  *kept = std::move(other);
  CHECK(reclaimers.reclaim_all() == 10);
  CHECK(asked == 2);
  kept.reset();
  CHECK(reclaimers.reclaim_all() == 0);
}

}  // namespace dslaunch::kernels
