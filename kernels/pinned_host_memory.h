#pragma once

#include <cstdint>
#include <utility>

#include "kernels/backend.h"

namespace dslaunch::kernels {

// Host memory page-locked for a backend's copies (Backend::pin_host_memory)
// while this object lives. Movable, not copyable; the backend and the
// memory must outlive it.
class PinnedHostMemory {
 public:
  PinnedHostMemory() = default;
  PinnedHostMemory(Backend& backend, const void* host, int64_t bytes)
      : backend_(bytes > 0 && backend.pin_host_memory(host, bytes) ? &backend : nullptr),
        host_(backend_ != nullptr ? host : nullptr),
        bytes_(backend_ != nullptr ? bytes : 0) {}
  PinnedHostMemory(PinnedHostMemory&& other) noexcept { *this = std::move(other); }
  PinnedHostMemory& operator=(PinnedHostMemory&& other) noexcept {
    if (this != &other) {
      release();
      backend_ = std::exchange(other.backend_, nullptr);
      host_ = std::exchange(other.host_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  PinnedHostMemory(const PinnedHostMemory&) = delete;
  PinnedHostMemory& operator=(const PinnedHostMemory&) = delete;
  ~PinnedHostMemory() { release(); }

  // The bytes pinned: those asked for, or 0 where the backend did not pin.
  int64_t bytes() const { return bytes_; }

 private:
  void release() {
    if (backend_ != nullptr) backend_->unpin_host_memory(host_);
    backend_ = nullptr;
  }

  Backend* backend_ = nullptr;
  const void* host_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace dslaunch::kernels
