#pragma once

#include <pthread.h>

#include <chrono>
#include <string>

namespace dslaunch::worker {

// Installs the signal handler that capture_stack uses (SIGURG, which nothing
// else in a rank sends). Call once, early, from the main thread.
void install_stack_dump_handler();

// The call stack of `thread`, one frame per line, symbolised. The thread is
// interrupted by a signal whose handler records its return addresses; this
// waits for it up to `timeout`. "" when the thread did not answer (it may be
// blocked with signals masked). One capture at a time (serialised inside).
std::string capture_stack(pthread_t thread, std::chrono::milliseconds timeout);

}  // namespace dslaunch::worker
