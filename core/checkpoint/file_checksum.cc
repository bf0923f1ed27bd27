#include "core/checkpoint/file_checksum.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <xxhash.h>

#include "core/errno_status.h"

namespace dslaunch::core {

std::string xxh64_hex(uint64_t hash) { return fmt::format("{:016x}", hash); }

std::optional<std::string> file_xxh64(const std::string& path, std::string& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = fmt::format("cannot open '{}': {}", path, errno_text(errno));
    return std::nullopt;
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(),
                                                                   XXH64_freeState);
  XXH64_reset(state.get(), 0);
  std::vector<char> block(8 << 20);
  for (;;) {
    const ssize_t got = ::read(fd, block.data(), block.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      error = fmt::format("cannot read '{}': {}", path, errno_text(errno));
      ::close(fd);
      return std::nullopt;
    }
    if (got == 0) break;
    XXH64_update(state.get(), block.data(), static_cast<size_t>(got));
  }
  ::close(fd);
  return xxh64_hex(XXH64_digest(state.get()));
}

}  // namespace dslaunch::core
