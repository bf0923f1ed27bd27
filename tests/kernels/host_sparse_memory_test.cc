// SparseMemory's page bookkeeping over the host's pages: a page holds memory
// while a committed range touches it, the tally counts it, and what was
// never committed (or was released) faults when read.
#include "kernels/host_sparse_memory.h"

#include <unistd.h>

#include <catch2/catch.hpp>

#include <csignal>
#include <new>
#include <stdexcept>

#include "tests/support/signal_of.h"

namespace dslaunch::kernels {
namespace {

using dslaunch::testing::signal_of;

TEST_CASE("sparse memory holds the pages committed ranges touch, counted by users") {
  AllocationTally tally;
  auto memory = make_host_sparse_memory(10 * 4096 + 100, tally);
  const int64_t page = memory->page_bytes();
  REQUIRE(page == sysconf(_SC_PAGESIZE));
  CHECK(memory->resident_bytes() == 0);
  CHECK_FALSE(memory->committed(0, 1));

  // Two ranges sharing page 1: [page/2, 1.5 pages) and [1.5 pages, 3 pages).
  memory->commit(page / 2, page + page / 2);
  memory->commit(page + page / 2, 3 * page);
  CHECK(memory->resident_bytes() == 3 * page);
  CHECK(tally.peak() == 3 * page);
  CHECK(memory->committed(0, 3 * page));
  CHECK_FALSE(memory->committed(0, 3 * page + 1));
  auto* bytes = static_cast<volatile char*>(memory->data());
  bytes[page + 10] = 7;

  // Releasing the first keeps the shared page for the second.
  memory->release(page / 2, page + page / 2);
  CHECK(memory->resident_bytes() == 2 * page);
  CHECK(memory->committed(page, 3 * page));
  CHECK_FALSE(memory->committed(0, 1));
  CHECK(bytes[page + 10] == 7);
  CHECK(signal_of([&] { (void)bytes[0]; }) == SIGSEGV);

  memory->release(page + page / 2, 3 * page);
  CHECK(memory->resident_bytes() == 0);
  CHECK(signal_of([&] { (void)bytes[page + 10]; }) == SIGSEGV);
  CHECK(memory->peak_resident_bytes() == 3 * page);

  // The last, partial page is whole too.
  memory->commit(10 * page, 10 * page + 100);
  CHECK(memory->resident_bytes() == page);
  bytes[10 * page + 99] = 1;
  CHECK(bytes[10 * page + 99] == 1);
  memory.reset();
  CHECK(tally.peak() == 3 * page);
}

TEST_CASE("sparse memory refuses ranges outside it and releases never committed") {
  AllocationTally tally;
  auto memory = make_host_sparse_memory(4096, tally);
  CHECK_THROWS_AS(memory->commit(0, 4097), std::out_of_range);
  CHECK_THROWS_AS(memory->commit(-1, 10), std::out_of_range);
  CHECK_THROWS_AS(memory->release(0, 10), std::logic_error);
  memory->commit(0, 10);
  memory->release(0, 10);
  CHECK_THROWS_AS(memory->release(0, 10), std::logic_error);
  CHECK(memory->resident_bytes() == 0);
  // An empty range (a rank's empty partition) takes no page.
  memory->commit(100, 100);
  CHECK(memory->resident_bytes() == 0);
  memory->release(100, 100);
}

TEST_CASE("sparse memory's released pages give their memory back to the OS") {
  AllocationTally tally;
  constexpr int64_t kBytes = int64_t{64} << 20;
  auto memory = make_host_sparse_memory(kBytes, tally);
  auto* bytes = static_cast<char*>(memory->data());
  memory->commit(0, kBytes);
  for (int64_t i = 0; i < kBytes; i += memory->page_bytes()) bytes[i] = 1;
  memory->release(0, kBytes);
  memory->commit(0, memory->page_bytes());
  CHECK(bytes[0] == 0);  // a fresh page: the old one went back
}

}  // namespace
}  // namespace dslaunch::kernels
