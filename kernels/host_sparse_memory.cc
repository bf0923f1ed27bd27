#include "kernels/host_sparse_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>

namespace dslaunch::kernels {
namespace {

int64_t host_page_bytes() { return sysconf(_SC_PAGESIZE); }

int64_t pages_rounded(int64_t bytes) {
  const int64_t page = host_page_bytes();
  return (std::max<int64_t>(bytes, 1) + page - 1) / page * page;
}

void* reserve(int64_t bytes) {
  void* base = mmap(nullptr, static_cast<size_t>(pages_rounded(bytes)), PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) throw std::bad_alloc();
  return base;
}

class HostSparseMemory final : public SparseMemory {
 public:
  HostSparseMemory(int64_t bytes, AllocationTally& tally)
      : SparseMemory(reserve(bytes), bytes, host_page_bytes(), tally) {}
  ~HostSparseMemory() override { munmap(data(), static_cast<size_t>(pages_rounded(bytes()))); }

 private:
  char* page(int64_t index) const { return static_cast<char*>(data()) + index * page_bytes(); }
  void map(int64_t first, int64_t count) override {
    if (mprotect(page(first), static_cast<size_t>(count * page_bytes()), PROT_READ | PROT_WRITE) !=
        0) {
      throw std::bad_alloc();
    }
  }
  // Dropping the pages first makes their memory go at once.
  void unmap(int64_t first, int64_t count) override {
    const auto length = static_cast<size_t>(count * page_bytes());
    madvise(page(first), length, MADV_DONTNEED);
    mprotect(page(first), length, PROT_NONE);
  }
};

}  // namespace

std::unique_ptr<SparseMemory> make_host_sparse_memory(int64_t bytes, AllocationTally& tally) {
  return std::make_unique<HostSparseMemory>(bytes, tally);
}

}  // namespace dslaunch::kernels
