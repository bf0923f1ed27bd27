#pragma once

#include <string>

namespace dslaunch::worker {

// The value of environment variable `name` ("" when unset), removed from
// this process's environment so that nothing it starts inherits it. For the
// variables that carry a secret to a rank: the job's token (DSL_JOB_TOKEN) is
// the only one (TLS settings are file paths, not key material). The
// value's bytes are overwritten first: for a variable inherited at exec they
// live in the block /proc/<pid>/environ shows, which unsetenv leaves as is.
// Call before any thread or child starts: the environment is not
// thread-safe.
std::string take_secret_variable(const char* name);

}  // namespace dslaunch::worker
