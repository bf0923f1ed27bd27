#include "worker/parallel/releasable_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/errno_status.h"

namespace dslaunch::worker {

ReleasableBuffer::ReleasableBuffer(int64_t n) : n_(std::max<int64_t>(n, 0)) {
  page_floats_ = sysconf(_SC_PAGESIZE) / static_cast<int64_t>(sizeof(float));
  capacity_ = (n_ + page_floats_ - 1) / page_floats_ * page_floats_;
  if (capacity_ == 0) return;
  void* mapped = mmap(nullptr, capacity_ * sizeof(float), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapped == MAP_FAILED) {
    status_ = core::errno_status(
        errno, "releasable buffer: mmap of " + std::to_string(capacity_ * sizeof(float)) +
                   " bytes failed");
    n_ = 0;
    capacity_ = 0;
    return;
  }
  data_ = static_cast<float*>(mapped);
}

ReleasableBuffer::~ReleasableBuffer() {
  if (data_ != nullptr) munmap(data_, capacity_ * sizeof(float));
}

void ReleasableBuffer::zero(int64_t begin, int64_t end) {
  begin = std::max<int64_t>(begin, 0);
  end = std::min(end, capacity_);
  if (begin >= end) return;
  const int64_t resident = resident_bytes();
  int64_t seen = peak_.load();
  while (resident > seen && !peak_.compare_exchange_weak(seen, resident)) {
  }
  const int64_t first_page = (begin + page_floats_ - 1) / page_floats_ * page_floats_;
  const int64_t last_page = end / page_floats_ * page_floats_;
  if (first_page >= last_page) {
    std::memset(data_ + begin, 0, (end - begin) * sizeof(float));
    return;
  }
  std::memset(data_ + begin, 0, (first_page - begin) * sizeof(float));
  std::memset(data_ + last_page, 0, (end - last_page) * sizeof(float));
  // Cannot fail on a range of our own private anonymous mapping.
  madvise(data_ + first_page, (last_page - first_page) * sizeof(float), MADV_DONTNEED);
}

int64_t ReleasableBuffer::resident_bytes() const {
  if (data_ == nullptr) return 0;
  const int64_t pages = capacity_ / page_floats_;
  std::vector<unsigned char> in_memory(pages);
  if (mincore(data_, capacity_ * sizeof(float), in_memory.data()) != 0) return 0;
  int64_t resident = 0;
  for (unsigned char page : in_memory) resident += page & 1;
  return resident * page_floats_ * static_cast<int64_t>(sizeof(float));
}

}  // namespace dslaunch::worker
