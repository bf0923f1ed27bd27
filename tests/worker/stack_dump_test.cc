#include "worker/stack_dump.h"

#include <atomic>
#include <regex>
#include <thread>

#include <catch2/catch.hpp>

namespace dslaunch::worker {
std::atomic<bool> g_keep_spinning{true};
std::atomic<bool> g_spinning{false};

// Not inlined, so that it is a frame of the captured stack.
__attribute__((noinline)) void spin_in_a_recognisable_function() {
  g_spinning.store(true);
  while (g_keep_spinning.load()) std::this_thread::yield();
}

TEST_CASE("the stack of another thread names its functions, files and lines") {
  install_stack_dump_handler();
  std::thread busy(spin_in_a_recognisable_function);
  while (!g_spinning.load()) std::this_thread::yield();
  const std::string stack = capture_stack(busy.native_handle(), std::chrono::seconds(5));
  g_keep_spinning.store(false);
  busy.join();
  INFO(stack);
  // Each frame: the function, the file and line (the build keeps line
  // tables; for code inlined into the frame, the inlined code's), the binary.
  CHECK(std::regex_search(
      stack, std::regex(R"(  #\d+ dslaunch::worker::spin_in_a_recognisable_function\(\) at )"
                        R"(\S+:\d+ \(stack_dump_test\)\n)")));
  CHECK(
      std::regex_search(stack, std::regex(R"(  #\d+ start_thread at \S+:\d+ \(libc\.so\.6\)\n)")));
  CHECK(stack.rfind("  #0 ", 0) == 0);
}

}  // namespace dslaunch::worker
