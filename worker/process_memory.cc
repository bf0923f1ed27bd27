#include "worker/process_memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

namespace dslaunch::worker {

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0;
  int64_t resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

int64_t peak_resident_bytes() {
  rusage usage{};
  const int64_t peak =
      ::getrusage(RUSAGE_SELF, &usage) == 0 ? static_cast<int64_t>(usage.ru_maxrss) * 1024 : 0;
  // The kernel's high-water mark and statm count pages a little apart: the
  // peak is never below what statm shows now.
  return std::max(peak, resident_bytes());
}

}  // namespace dslaunch::worker
