#include "worker/stack_dump.h"

#include <execinfo.h>
#include <signal.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

namespace dslaunch::worker {
namespace {

constexpr int kMaxFrames = 64;
constexpr int kStackSignal = SIGURG;

// A signal handler can reach no other state than this; capture_stack owns it
// under its mutex.
struct Capture {
  void* frames[kMaxFrames];
  std::atomic<int> depth{-1};  // -1: no answer yet
};
Capture g_capture;
std::mutex g_capture_mutex;

void record_stack(int) { g_capture.depth.store(backtrace(g_capture.frames, kMaxFrames)); }

}  // namespace

void install_stack_dump_handler() {
  // backtrace() loads libgcc on its first call, which is not signal-safe:
  // make that first call here.
  void* warm_up[1];
  backtrace(warm_up, 1);
  struct sigaction action {};
  action.sa_handler = record_stack;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(kStackSignal, &action, nullptr);
}

std::string capture_stack(pthread_t thread, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  g_capture.depth.store(-1);
  if (pthread_kill(thread, kStackSignal) != 0) return "";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (g_capture.depth.load() < 0) {
    if (std::chrono::steady_clock::now() >= deadline) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const int depth = g_capture.depth.load();
  std::unique_ptr<char*, void (*)(void*)> symbols(backtrace_symbols(g_capture.frames, depth), free);
  std::string text;
  // Frame 0 is the handler and 1 the signal trampoline: start at the
  // interrupted code.
  for (int i = 2; i < depth; ++i) {
    text += "  #" + std::to_string(i - 2) + " " + (symbols ? symbols.get()[i] : "?") + "\n";
  }
  return text;
}

}  // namespace dslaunch::worker
