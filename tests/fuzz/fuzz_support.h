#pragma once

// What the libFuzzer targets share: a trap for a broken promise, and a
// scratch folder for the parsers that read files rather than bytes.

#include <string>
#include <string_view>

namespace dslaunch::fuzz {

// Traps (a crash libFuzzer records with its input) when a promise is broken.
inline void require(bool promise_kept) {
  if (!promise_kept) __builtin_trap();
}

// A folder of this process's own under /tmp (libFuzzer's -jobs run several
// processes at once), created on first use and removed when the process
// exits normally; a crash leaves it for the inspection of the input.
const std::string& scratch_dir();

// Empties scratch_dir(), so that no file of an earlier input is seen.
void clear_scratch_dir();

// Writes `bytes` to scratch_dir()/`name` (creating its folder) and returns
// the file's path.
std::string write_scratch_file(const std::string& name, std::string_view bytes);

}  // namespace dslaunch::fuzz
