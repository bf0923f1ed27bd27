#pragma once

#include <cstdint>
#include <utility>

#include "kernels/backend.h"

namespace dslaunch::kernels {

// `count` elements of T in a backend's memory, freed with it. Movable, not
// copyable; the backend must outlive it.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, int64_t count)
      : backend_(&backend),
        data_(count > 0 ? static_cast<T*>(backend.allocate(count * static_cast<int64_t>(sizeof(T))))
                        : nullptr),
        count_(count) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      backend_ = std::exchange(other.backend_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return count_; }
  int64_t bytes() const { return count_ * static_cast<int64_t>(sizeof(T)); }

 private:
  void release() {
    if (backend_ != nullptr) backend_->deallocate(data_);
    data_ = nullptr;
  }

  Backend* backend_ = nullptr;
  T* data_ = nullptr;
  int64_t count_ = 0;
};

}  // namespace dslaunch::kernels
