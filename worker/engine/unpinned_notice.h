#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace dslaunch::worker::engine {

// offload_optimizer.pin_memory where the device pinned less than asked
// (Backend::pin_host_memory: its driver refused, short of lockable
// memory): tells `notice`, if set, that the copies through those `bytes`
// stay pageable. Nothing when every byte was pinned.
void notice_unpinned(const std::function<void(const std::string&)>& notice, int64_t bytes);

}  // namespace dslaunch::worker::engine
