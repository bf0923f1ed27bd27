#include "worker/engine/unpinned_notice.h"

#include <fmt/format.h>

#include "core/byte_size_text.h"

namespace dslaunch::worker::engine {

void notice_unpinned(const std::function<void(const std::string&)>& notice, int64_t bytes) {
  if (bytes <= 0 || !notice) return;
  notice(fmt::format(
      "offload_optimizer.pin_memory: the GPU's driver did not page-lock {} of host memory (the "
      "limit on locked memory, or too little of it free); the offload copies through it stay "
      "pageable, which is slower",
      core::byte_size_text(bytes)));
}

}  // namespace dslaunch::worker::engine
