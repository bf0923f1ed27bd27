#include "worker/process_memory.h"

#include <cstring>
#include <memory>

#include <catch2/catch.hpp>

namespace dslaunch::worker {
namespace {

TEST_CASE("the resident peak grows by the memory a process touches, and stays") {
  // Resident first: the peak read after it covers it, however much the
  // process touches in between (the other order failed once by 8 pages).
  const int64_t now_before = resident_bytes();
  const int64_t before = peak_resident_bytes();
  CHECK(before > 0);
  CHECK(now_before > 0);
  CHECK(now_before <= before);
  constexpr int64_t kBytes = int64_t{256} << 20;
  {
    auto block = std::make_unique<char[]>(kBytes);
    std::memset(block.get(), 1, kBytes);  // touched: resident
    const int64_t now = resident_bytes();
    CHECK(now >= now_before + kBytes * 9 / 10);
    CHECK(peak_resident_bytes() >= now);
  }
  // Freed (returned to the system for a block this large), the peak remains.
  CHECK(peak_resident_bytes() >= now_before + kBytes * 9 / 10);
}

}  // namespace
}  // namespace dslaunch::worker
