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

// Pages of one PROT_NONE mapping made accessible as they are committed,
// while a scope is open; their memory goes back to the OS on release.
class GuardedMemory::Sparse final : public SparseMemory {
 public:
  Sparse(GuardedMemory& memory, int64_t bytes, AllocationTally& tally)
      : SparseMemory(reserve(bytes), bytes, sysconf(_SC_PAGESIZE), tally), memory_(memory) {
    memory_.sparse_.insert(this);
  }
  ~Sparse() override {
    memory_.sparse_.erase(this);
    munmap(data(), static_cast<size_t>(page_rounded(bytes())));
  }

  bool holds(const char* start, int64_t length) const {
    const auto* base = static_cast<const char*>(data());
    return start >= base && start + length <= base + bytes() &&
           committed(start - base, start - base + length);
  }
  void set_access(bool open) const {
    for_mapped_runs(
        [&](int64_t first, int64_t count) { protect(page(first), count * page_bytes(), open); });
  }

 private:
  static void* reserve(int64_t bytes) {
    void* base = mmap(nullptr, static_cast<size_t>(page_rounded(bytes)), PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    return base;
  }
  char* page(int64_t index) const { return static_cast<char*>(data()) + index * page_bytes(); }
  void map(int64_t first, int64_t count) override {
    if (memory_.open_depth_ > 0) protect(page(first), count * page_bytes(), true);
  }
  void unmap(int64_t first, int64_t count) override {
    madvise(page(first), static_cast<size_t>(count * page_bytes()), MADV_DONTNEED);
    if (memory_.open_depth_ > 0) protect(page(first), count * page_bytes(), false);
  }

  GuardedMemory& memory_;
};

std::unique_ptr<SparseMemory> GuardedMemory::reserve_sparse(int64_t bytes, AllocationTally& tally) {
  return std::make_unique<Sparse>(*this, bytes, tally);
}

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
  for (const Sparse* sparse : sparse_) {
    if (sparse->holds(start, bytes)) return true;
  }
  auto after = regions_.upper_bound(start);
  if (after == regions_.begin()) return false;
  const auto region = std::prev(after);
  return start + bytes <= region->first + region->second;
}

void GuardedMemory::set_access(bool open) {
  for (const auto& [start, bytes] : regions_) protect(start, bytes, open);
  for (const Sparse* sparse : sparse_) sparse->set_access(open);
}

GuardedMemory::Scope::Scope(GuardedMemory& memory) : memory_(memory) {
  if (memory_.open_depth_++ == 0) memory_.set_access(true);
}

GuardedMemory::Scope::~Scope() {
  if (--memory_.open_depth_ == 0) memory_.set_access(false);
}

}  // namespace dslaunch::kernels::simt
