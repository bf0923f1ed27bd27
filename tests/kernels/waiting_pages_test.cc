#include "kernels/waiting_pages.h"

#include <cstdint>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace dslaunch::kernels {
namespace {

using Runs = std::vector<std::pair<int64_t, int64_t>>;

Runs done(WaitingPages& pages, uint64_t ticket, int64_t first, int64_t count) {
  Runs given_back;
  pages.done(ticket, first, count,
             [&](int64_t run, int64_t n) { given_back.emplace_back(run, n); });
  return given_back;
}

TEST_CASE("released pages go back in runs when their release is done") {
  WaitingPages pages(10);
  const uint64_t ticket = pages.wait(2, 5);
  for (int64_t p = 0; p < 10; ++p) CHECK(pages.waiting(p) == (p >= 2 && p < 7));
  CHECK(done(pages, ticket, 2, 5) == Runs{{2, 5}});
  for (int64_t p = 0; p < 10; ++p) CHECK_FALSE(pages.waiting(p));
  CHECK(done(pages, ticket, 2, 5).empty());  // once
}

TEST_CASE("a page committed again leaves its release, which gives back the rest") {
  WaitingPages pages(10);
  const uint64_t ticket = pages.wait(0, 6);
  pages.keep(0);
  pages.keep(3);
  CHECK(done(pages, ticket, 0, 6) == Runs{{1, 2}, {4, 2}});
}

TEST_CASE("a page released again belongs to its latest release only") {
  WaitingPages pages(4);
  const uint64_t first = pages.wait(0, 3);
  pages.keep(1);
  const uint64_t second = pages.wait(1, 2);  // page 1 again, and page 2 a second time
  CHECK(first != second);
  CHECK(done(pages, first, 0, 3) == Runs{{0, 1}});
  CHECK(pages.waiting(1));
  CHECK(pages.waiting(2));
  CHECK(done(pages, second, 1, 2) == Runs{{1, 2}});
}

}  // namespace
}  // namespace dslaunch::kernels
