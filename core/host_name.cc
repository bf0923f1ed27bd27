#include "core/host_name.h"

#include <unistd.h>

#include <array>

namespace dslaunch::core {

std::string host_name() {
  // POSIX leaves a truncated name unterminated: one byte is kept for the NUL.
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "";
  return name.data();
}

}  // namespace dslaunch::core
