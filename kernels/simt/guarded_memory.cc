#include "kernels/simt/guarded_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <new>
#include <stdexcept>

namespace dslaunch::kernels::simt {
namespace {

int64_t page_rounded(int64_t bytes) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  return (std::max<int64_t>(bytes, 1) + page - 1) / page * page;
}

// mprotect of a whole mapping of ours fails only if the kernel runs out of
// memory for its page tables: nothing to go on with (and scopes close in
// destructors, which must not throw).
void protect(const char* start, int64_t bytes, bool open) {
  if (mprotect(const_cast<char*>(start), static_cast<size_t>(bytes),
               open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    std::perror("guarded device memory: mprotect");
    std::abort();
  }
}

}  // namespace

GuardedMemory::~GuardedMemory() {
  for (const auto& [start, bytes] : regions_) {
    munmap(const_cast<char*>(start), static_cast<size_t>(bytes));
  }
}

void* GuardedMemory::allocate(int64_t bytes) {
  const int64_t mapped = page_rounded(bytes);
  void* data = mmap(nullptr, static_cast<size_t>(mapped),
                    open_depth_ > 0 ? PROT_READ | PROT_WRITE : PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) throw std::bad_alloc();
  regions_[static_cast<const char*>(data)] = mapped;
  return data;
}

void GuardedMemory::deallocate(void* data) {
  if (data == nullptr) return;
  const auto found = regions_.find(static_cast<const char*>(data));
  if (found == regions_.end()) {
    throw std::logic_error("guarded device memory: deallocate of a pointer it did not allocate");
  }
  munmap(data, static_cast<size_t>(found->second));
  regions_.erase(found);
}

bool GuardedMemory::holds(const void* data, int64_t bytes) const {
  const auto* start = static_cast<const char*>(data);
  auto after = regions_.upper_bound(start);
  if (after == regions_.begin()) return false;
  const auto region = std::prev(after);
  return start + bytes <= region->first + region->second;
}

void GuardedMemory::set_access(bool open) {
  for (const auto& [start, bytes] : regions_) protect(start, bytes, open);
}

GuardedMemory::Scope::Scope(GuardedMemory& memory) : memory_(memory) {
  if (memory_.open_depth_++ == 0) memory_.set_access(true);
}

GuardedMemory::Scope::~Scope() {
  if (--memory_.open_depth_ == 0) memory_.set_access(false);
}

}  // namespace dslaunch::kernels::simt
