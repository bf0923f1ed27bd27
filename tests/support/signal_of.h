#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

namespace dslaunch::testing {

// Runs touch() in a child process; returns the signal that ended it, or 0
// when it exited normally: how a test sees a memory access fault.
template <class Touch>
int signal_of(const Touch& touch) {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    touch();
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

}  // namespace dslaunch::testing
