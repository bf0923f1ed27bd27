#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <utility>

namespace dslaunch::kernels {

// Memory a backend's parts hold without use and can give back on demand: a
// sparse memory's pages released in stream order keep theirs until their
// stream gets there (sparse_memory.h). An allocation short of room asks
// every holder to give back what it can, waiting for the GPU where it must,
// and tries once more, as cudaMallocAsync's pool does before it reports no
// room. Thread-safe; a Reclaim must not add or remove registrations.
class MemoryReclaimers {
 public:
  // Gives back what its holder keeps without use; returns those bytes.
  using Reclaim = std::function<int64_t()>;

  // Keeps its Reclaim registered while it lives.
  class Registration {
   public:
    Registration() = default;
    Registration(Registration&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)), entry_(other.entry_) {}
    Registration& operator=(Registration&& other) noexcept {
      if (this != &other) {
        remove();
        owner_ = std::exchange(other.owner_, nullptr);
        entry_ = other.entry_;
      }
      return *this;
    }
    ~Registration() { remove(); }

   private:
    friend class MemoryReclaimers;
    Registration(MemoryReclaimers* owner, std::list<Reclaim>::iterator entry)
        : owner_(owner), entry_(entry) {}
    void remove() {
      if (owner_ == nullptr) return;
      std::lock_guard lock(owner_->mutex_);
      owner_->reclaims_.erase(entry_);
      owner_ = nullptr;
    }

    MemoryReclaimers* owner_ = nullptr;
    std::list<Reclaim>::iterator entry_;
  };

  [[nodiscard]] Registration add(Reclaim reclaim) {
    std::lock_guard lock(mutex_);
    reclaims_.push_back(std::move(reclaim));
    return Registration(this, std::prev(reclaims_.end()));
  }

  // Asks every holder, in the order they came; the bytes given back in all.
  int64_t reclaim_all() {
    std::lock_guard lock(mutex_);
    int64_t bytes = 0;
    for (const Reclaim& reclaim : reclaims_) bytes += reclaim();
    return bytes;
  }

 private:
  std::mutex mutex_;
  std::list<Reclaim> reclaims_;
};

}  // namespace dslaunch::kernels
