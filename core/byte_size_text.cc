#include "core/byte_size_text.h"

#include <fmt/format.h>

namespace dslaunch::core {

std::string byte_size_text(int64_t bytes) {
  const double size = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.1f} GiB", size / (int64_t{1} << 30));
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", size / (int64_t{1} << 20));
  if (bytes >= (int64_t{1} << 10)) return fmt::format("{:.1f} KiB", size / (int64_t{1} << 10));
  return fmt::format("{} B", bytes);
}

}  // namespace dslaunch::core
