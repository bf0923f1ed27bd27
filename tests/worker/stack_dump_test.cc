#include "worker/stack_dump.h"

#include <atomic>
#include <thread>

#include <catch2/catch.hpp>

namespace dslaunch::worker {
std::atomic<bool> g_keep_spinning{true};
std::atomic<bool> g_spinning{false};

// Not inlined, and with external linkage (exported by -rdynamic), so its name
// appears in the captured stack.
__attribute__((noinline)) void spin_in_a_recognisable_function() {
  g_spinning.store(true);
  while (g_keep_spinning.load()) std::this_thread::yield();
}

TEST_CASE("the stack of another thread names the function it is in") {
  install_stack_dump_handler();
  std::thread busy(spin_in_a_recognisable_function);
  while (!g_spinning.load()) std::this_thread::yield();
  const std::string stack = capture_stack(busy.native_handle(), std::chrono::seconds(5));
  g_keep_spinning.store(false);
  busy.join();
  INFO(stack);
  CHECK(stack.find("spin_in_a_recognisable_function") != std::string::npos);
  CHECK(stack.rfind("  #0 ", 0) == 0);
}

}  // namespace dslaunch::worker
