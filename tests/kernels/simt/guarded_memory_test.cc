// Guarded device memory: the host reaches it only inside a scope; outside,
// a read is a segmentation fault (checked in a child process).
#include "kernels/simt/guarded_memory.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <new>

#include "tests/support/signal_of.h"

namespace dslaunch::kernels::simt {
namespace {

using dslaunch::testing::signal_of;

TEST_CASE("guarded memory is reachable inside a scope only, and scopes nest") {
  GuardedMemory memory;
  auto* data = static_cast<volatile float*>(memory.allocate(1000 * sizeof(float)));
  {
    const GuardedMemory::Scope open(memory);
    data[999] = 2.5f;
    {
      const GuardedMemory::Scope nested(memory);
      data[0] = 1.5f;
    }
    CHECK(data[0] == 1.5f);  // the inner scope's end left it open
  }
  CHECK(signal_of([&] { (void)data[0]; }) == SIGSEGV);
  CHECK(signal_of([&] { data[999] = 0.0f; }) == SIGSEGV);
  CHECK(signal_of([&] {
          const GuardedMemory::Scope open(memory);
          if (data[0] != 1.5f || data[999] != 2.5f) _exit(3);
        }) == 0);
  memory.deallocate(const_cast<float*>(data));
}

TEST_CASE("guarded memory knows its allocations' bounds") {
  GuardedMemory memory;
  auto* a = static_cast<char*>(memory.allocate(100));
  auto* b = static_cast<char*>(memory.allocate(10000));
  CHECK(memory.holds(a, 100));
  CHECK(memory.holds(a + 50, 50));
  CHECK(memory.holds(b + 9999, 1));
  int on_the_stack = 0;
  CHECK_FALSE(memory.holds(&on_the_stack, sizeof on_the_stack));
  CHECK_FALSE(memory.holds(b, 1 << 20));  // runs past the mapping
  // Allocated inside a scope, memory is open until the scope ends.
  {
    const GuardedMemory::Scope open(memory);
    auto* c = static_cast<char*>(memory.allocate(64));
    std::memset(c, 1, 64);
    memory.deallocate(c);
  }
  memory.deallocate(a);
  CHECK_FALSE(memory.holds(a, 1));
  memory.deallocate(b);
}

TEST_CASE("guarded memory hands out its arena first fit, zeroed, and refuses what is past it") {
  GuardedMemory memory;
  const int64_t page = sysconf(_SC_PAGESIZE);
  auto* a = static_cast<char*>(memory.allocate(3 * page));
  auto* b = static_cast<char*>(memory.allocate(100));
  CHECK(b == a + 3 * page);  // side by side: a scope opens both with one call
  {
    const GuardedMemory::Scope open(memory);
    std::memset(a, 7, 3 * page);
  }
  memory.deallocate(a);
  // The freed pages come back first, zeroed as fresh memory is.
  auto* c = static_cast<char*>(memory.allocate(2 * page));
  CHECK(c == a);
  CHECK(signal_of([&] {
          const GuardedMemory::Scope open(memory);
          for (int i = 0; i < 2 * page; ++i) {
            if (c[i] != 0) _exit(3);
          }
        }) == 0);
  CHECK_THROWS_AS(memory.allocate(int64_t{1} << 41), std::bad_alloc);
  memory.deallocate(b);
  memory.deallocate(c);
}

TEST_CASE("guarded sparse memory opens its committed pages only, inside a scope") {
  GuardedMemory memory;
  AllocationTally tally;
  auto sparse = memory.reserve_sparse(8 * 4096, tally);
  const int64_t page = sparse->page_bytes();
  auto* bytes = static_cast<volatile char*>(sparse->data());
  sparse->commit(page, 3 * page);
  CHECK(memory.holds(const_cast<char*>(bytes) + page, 2 * page));
  CHECK_FALSE(memory.holds(const_cast<char*>(bytes) + page, 2 * page + 1));
  CHECK_FALSE(memory.holds(const_cast<char*>(bytes), 1));
  {
    const GuardedMemory::Scope open(memory);
    bytes[page] = 4;
    bytes[3 * page - 1] = 5;
    // Committed inside a scope: open at once.
    sparse->commit(5 * page, 6 * page);
    bytes[5 * page] = 6;
  }
  CHECK(signal_of([&] { (void)bytes[page]; }) == SIGSEGV);  // the scope closed it
  CHECK(signal_of([&] {
          const GuardedMemory::Scope open(memory);
          if (bytes[page] != 4 || bytes[3 * page - 1] != 5 || bytes[5 * page] != 6) _exit(3);
        }) == 0);
  // Never committed, or released: closed inside a scope too.
  sparse->release(5 * page, 6 * page);
  CHECK(signal_of([&] {
          const GuardedMemory::Scope open(memory);
          (void)bytes[0];
        }) == SIGSEGV);
  CHECK(signal_of([&] {
          const GuardedMemory::Scope open(memory);
          (void)bytes[5 * page];
        }) == SIGSEGV);
  CHECK(tally.peak() == 3 * page);
  sparse.reset();
  CHECK_FALSE(memory.holds(const_cast<char*>(bytes) + page, 1));
}

}  // namespace
}  // namespace dslaunch::kernels::simt
