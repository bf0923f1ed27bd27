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

// Address space only: nothing is committed until a page is written.
constexpr int64_t kArenaBytes = int64_t{1} << 40;

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
      : SparseMemory(memory.take(bytes), bytes, sysconf(_SC_PAGESIZE), tally), memory_(memory) {
    memory_.sparse_.insert(this);
  }
  ~Sparse() override {
    memory_.sparse_.erase(this);
    memory_.give_back(static_cast<char*>(data()), bytes());
  }

  bool holds(const char* start, int64_t length) const {
    const auto* base = static_cast<const char*>(data());
    return start >= base && start + length <= base + bytes() &&
           committed(start - base, start - base + length);
  }
  // Adds each run of committed pages to `runs` (start -> bytes).
  void add_mapped_runs(std::map<const char*, int64_t>& runs) const {
    for_mapped_runs(
        [&](int64_t first, int64_t count) { runs[page(first)] = count * page_bytes(); });
  }

 private:
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

GuardedMemory::GuardedMemory() {
  void* arena = mmap(nullptr, static_cast<size_t>(kArenaBytes), PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (arena == MAP_FAILED) throw std::bad_alloc();
  arena_ = static_cast<char*>(arena);
  free_[0] = kArenaBytes;
}

GuardedMemory::~GuardedMemory() { munmap(arena_, static_cast<size_t>(kArenaBytes)); }

char* GuardedMemory::take(int64_t bytes) {
  const int64_t rounded = page_rounded(bytes);
  const auto fits = std::find_if(free_.begin(), free_.end(),
                                 [&](const auto& range) { return range.second >= rounded; });
  if (fits == free_.end()) throw std::bad_alloc();
  const auto [offset, length] = *fits;
  free_.erase(fits);
  if (length > rounded) free_[offset + rounded] = length - rounded;
  return arena_ + offset;
}

void GuardedMemory::give_back(char* start, int64_t bytes) {
  const int64_t rounded = page_rounded(bytes);
  madvise(start, static_cast<size_t>(rounded), MADV_DONTNEED);  // zero when taken again
  if (open_depth_ > 0) protect(start, rounded, false);
  int64_t offset = start - arena_;
  int64_t length = rounded;
  // Merged with the free ranges either side.
  const auto after = free_.find(offset + length);
  if (after != free_.end()) {
    length += after->second;
    free_.erase(after);
  }
  const auto next = free_.upper_bound(offset);
  if (next != free_.begin()) {
    const auto before = std::prev(next);
    if (before->first + before->second == offset) {
      offset = before->first;
      length += before->second;
      free_.erase(before);
    }
  }
  free_[offset] = length;
}

void* GuardedMemory::allocate(int64_t bytes) {
  char* data = take(bytes);
  if (open_depth_ > 0) protect(data, page_rounded(bytes), true);
  regions_[data] = page_rounded(bytes);
  return data;
}

void GuardedMemory::deallocate(void* data) {
  if (data == nullptr) return;
  const auto found = regions_.find(static_cast<const char*>(data));
  if (found == regions_.end()) {
    throw std::logic_error("guarded device memory: deallocate of a pointer it did not allocate");
  }
  give_back(static_cast<char*>(data), found->second);
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

// One mprotect for each stretch of adjacent allocations and committed
// pages: a step opens and closes the memory around each of thousands of
// backend calls.
void GuardedMemory::set_access(bool open) {
  std::map<const char*, int64_t> runs = regions_;
  for (const Sparse* sparse : sparse_) sparse->add_mapped_runs(runs);
  const char* start = nullptr;
  int64_t bytes = 0;
  for (const auto& [run_start, run_bytes] : runs) {
    if (start != nullptr && start + bytes == run_start) {
      bytes += run_bytes;
      continue;
    }
    if (start != nullptr) protect(start, bytes, open);
    start = run_start;
    bytes = run_bytes;
  }
  if (start != nullptr) protect(start, bytes, open);
}

GuardedMemory::Scope::Scope(GuardedMemory& memory) : memory_(memory) {
  if (memory_.open_depth_++ == 0) memory_.set_access(true);
}

GuardedMemory::Scope::~Scope() {
  if (--memory_.open_depth_ == 0) memory_.set_access(false);
}

}  // namespace dslaunch::kernels::simt
