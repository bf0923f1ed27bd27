#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace dslaunch::core {

// A scratch file on a fast drive for state that does not fit in memory
// (ZeRO-Infinity's NVMe offload): reads and writes of whole aligned ranges
// at any offset, started asynchronously through io_uring and waited for by
// ticket, O_DIRECT where the file system allows (buffered where not, pread
// and pwrite without io_uring). The file is created in `folder` and unlinked
// at once, so its space goes back to the drive when the process ends, however
// it ends. Buffers, offsets and sizes must be multiples of kSwapAlignment.
// Not thread-safe: one thread starts and waits.
class SwapFile {
 public:
  static constexpr int64_t kSwapAlignment = 4096;

  // How transfers go to the drive: DeepSpeed's aio settings, as io_uring
  // has them. A transfer is cut into requests of block_size bytes (a
  // multiple of kSwapAlignment), of which queue_depth are in flight at
  // most (a transfer that finds the queue full waits for room); a
  // transfer's requests are submitted together, or each on its own with
  // single_submit.
  struct Io {
    int64_t block_size = int64_t{1} << 20;
    int queue_depth = 8;
    bool single_submit = false;
  };

  static StatusOr<std::unique_ptr<SwapFile>> create(const std::string& folder, const Io& io);
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  using Ticket = int64_t;
  Ticket start_read(void* buffer, int64_t bytes, int64_t offset);
  Ticket start_write(const void* buffer, int64_t bytes, int64_t offset);
  // Waits for the transfer (and those started before it complete on their
  // own); ok, or the first failure of any transfer, which sticks.
  Status wait(Ticket ticket);
  Status wait_all();

  bool direct() const { return direct_; }
  bool uses_io_uring() const { return ring_ != nullptr; }

 private:
  struct Ring;
  SwapFile(int fd, bool direct, std::unique_ptr<Ring> ring, std::string folder, const Io& io);
  Ticket start(bool write, void* buffer, int64_t bytes, int64_t offset);
  void reap_one();
  void fail(int error_number, const char* what);

  int fd_;
  bool direct_;
  std::unique_ptr<Ring> ring_;
  std::string folder_;
  Io io_;
  Ticket next_ticket_ = 0;
  Ticket completed_below_ = 0;  // every ticket below it is done
  int64_t in_flight_ = 0;  // requests
  Status error_;
};

}  // namespace dslaunch::core
