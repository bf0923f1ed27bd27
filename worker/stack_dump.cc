#include "worker/stack_dump.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

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

std::string demangled(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> readable(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), free);
  return status == 0 && readable ? std::string(readable.get()) : std::string(name);
}

// Names addresses of this process with elfutils' libdwfl: the function from
// the symbol table, the source file and line from the line table (the build
// keeps line tables, -g1), and the module. One per capture: modules loaded
// since are seen.
class Symbolizer {
 public:
  Symbolizer() : dwfl_(dwfl_begin(&callbacks_), dwfl_end) {
    if (!dwfl_) return;
    dwfl_report_begin(dwfl_.get());
    const bool reported = dwfl_linux_proc_report(dwfl_.get(), getpid()) == 0;
    dwfl_report_end(dwfl_.get(), nullptr, nullptr);
    if (!reported) dwfl_.reset();
  }

  // "function at file:line (module)", as much of it as is known.
  std::string describe(uintptr_t address) const {
    Dwfl_Module* module = dwfl_ ? dwfl_addrmodule(dwfl_.get(), address) : nullptr;
    if (module == nullptr) return fmt::format("{:#x}", address);
    const char* module_name =
        dwfl_module_info(module, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    const char* symbol = dwfl_module_addrname(module, address);
    std::string text = symbol != nullptr ? demangled(symbol) : fmt::format("{:#x}", address);
    if (Dwfl_Line* line = dwfl_module_getsrc(module, address)) {
      int number = 0;
      if (const char* file = dwfl_lineinfo(line, nullptr, &number, nullptr, nullptr, nullptr)) {
        text += fmt::format(" at {}:{}", file, number);
      }
    }
    if (module_name != nullptr) {
      const std::string_view path(module_name);
      text += fmt::format(" ({})", path.substr(path.rfind('/') + 1));
    }
    return text;
  }

 private:
  static inline char* debuginfo_path_ = nullptr;
  static inline const Dwfl_Callbacks callbacks_ = {
      dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo, nullptr, &debuginfo_path_};
  std::unique_ptr<Dwfl, void (*)(Dwfl*)> dwfl_;
};

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
  const Symbolizer symbolizer;
  std::string text;
  // Frame 0 is the handler and 1 the signal trampoline: start at the
  // interrupted code, whose address is where it stood. The frames above it
  // hold return addresses, one past their call: the call's line is the
  // byte before.
  for (int i = 2; i < depth; ++i) {
    const auto address = reinterpret_cast<uintptr_t>(g_capture.frames[i]);
    text += fmt::format("  #{} {}\n", i - 2, symbolizer.describe(i == 2 ? address : address - 1));
  }
  return text;
}

}  // namespace dslaunch::worker
