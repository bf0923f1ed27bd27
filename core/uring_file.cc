#include "core/uring_file.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

namespace dslaunch::core {
namespace {

// O_DIRECT needs buffers, offsets and lengths aligned to the device's
// logical block: 4096 covers every current one.
constexpr int64_t kDirectAlignment = 4096;

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};

class UringWritableFile final : public WritableFile {
 public:
  UringWritableFile(int fd, const LargeFileOptions& options)
      : fd_(fd),
        block_(std::max<int64_t>(kDirectAlignment,
                                 options.block_bytes / kDirectAlignment * kDirectAlignment)),
        depth_(std::max(1, options.queue_depth)) {
    // Direct I/O where the file system takes it (tmpfs does not).
    const int flags = ::fcntl(fd_, F_GETFL);
    direct_ = flags >= 0 && ::fcntl(fd_, F_SETFL, flags | O_DIRECT) == 0;
    ring_ok_ = io_uring_queue_init(static_cast<unsigned>(depth_), &ring_, 0) == 0;
    for (int i = 0; i < depth_; ++i) {
      void* memory = nullptr;
      if (posix_memalign(&memory, kDirectAlignment, static_cast<size_t>(block_)) != 0) {
        error_ = ENOMEM;
        break;
      }
      buffers_.emplace_back(static_cast<char*>(memory));
      writes_.emplace_back();
      free_.push_back(i);
    }
    if (!free_.empty()) {
      current_ = free_.back();
      free_.pop_back();
    }
  }

  ~UringWritableFile() override {
    wait_all();
    if (ring_ok_) io_uring_queue_exit(&ring_);
    if (fd_ >= 0) ::close(fd_);
  }

  LargeFileMode mode() const { return {direct_, ring_ok_}; }

  int write_some(std::string_view data, size_t& written) override {
    written = 0;
    if (error_ != 0) return error_;
    if (data.empty()) return 0;
    const size_t room = static_cast<size_t>(block_ - filled_);
    const size_t n = std::min(room, data.size());
    std::memcpy(buffers_[current_].get() + filled_, data.data(), n);
    filled_ += static_cast<int64_t>(n);
    written = n;
    if (filled_ == block_) {
      submit(current_, block_);
      filled_ = 0;
      current_ = take_free_buffer();  // -1 only with error_ set: the next call reports it
    }
    return 0;
  }

  int sync() override {
    if (error_ == 0 && filled_ > 0) write_tail();
    wait_all();
    if (error_ != 0) return error_;
    return ::fsync(fd_) == 0 ? 0 : errno;
  }

  int close() override {
    wait_all();
    // Linux releases the descriptor even when close() fails: never retried.
    const int closed = ::close(std::exchange(fd_, -1)) == 0 ? 0 : errno;
    return error_ != 0 ? error_ : closed;
  }

 private:
  struct InFlight {
    int64_t offset = 0;
    int64_t bytes = 0;
    bool keep = false;  // the tail, written but still being filled
  };

  // Writes buffer `index`'s first `bytes` at the file's end; the buffer is
  // free again once written.
  void submit(int index, int64_t bytes) {
    const int64_t offset = offset_;
    offset_ += bytes;
    start_write(index, offset, bytes, false);
  }

  // The partial block being filled, written in place (padded to the
  // alignment under O_DIRECT, the file then cut back to its size) and kept:
  // later writes go on filling it and write it again, whole.
  void write_tail() {
    const int64_t size =
        direct_ ? (filled_ + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment : filled_;
    std::memset(buffers_[current_].get() + filled_, 0, static_cast<size_t>(size - filled_));
    start_write(current_, offset_, size, true);
    wait_all();
    if (error_ == 0 && size != filled_ && ::ftruncate(fd_, offset_ + filled_) != 0) {
      error_ = errno;
    }
  }

  void start_write(int index, int64_t offset, int64_t bytes, bool keep) {
    if (error_ == 0 && !ring_ok_) write_fully(index, 0, offset, bytes);
    if (error_ != 0 || !ring_ok_) {
      if (!keep) free_.push_back(index);
      return;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr && pending_ > 0) {  // the queue is full: make room
      reap_one();
      sqe = io_uring_get_sqe(&ring_);
    }
    if (sqe == nullptr) {
      error_ = EBUSY;
      if (!keep) free_.push_back(index);
      return;
    }
    io_uring_prep_write(sqe, fd_, buffers_[index].get(), static_cast<unsigned>(bytes),
                        static_cast<__u64>(offset));
    io_uring_sqe_set_data64(sqe, static_cast<__u64>(index));
    writes_[index] = {offset, bytes, keep};
    ++pending_;
    const int submitted = io_uring_submit(&ring_);
    if (submitted < 0 && error_ == 0) error_ = -submitted;
  }

  // pwrite of buffer bytes [done, bytes) at `offset` + done, going on after
  // short writes (what io_uring left of a short write, or every block
  // without io_uring).
  void write_fully(int index, int64_t done, int64_t offset, int64_t bytes) {
    while (done < bytes && error_ == 0) {
      const ssize_t n = ::pwrite(fd_, buffers_[index].get() + done,
                                 static_cast<size_t>(bytes - done), offset + done);
      if (n < 0) {
        if (errno != EINTR) error_ = errno;
        continue;
      }
      if (n == 0) error_ = EIO;
      done += n;
    }
  }

  // Waits for one write to complete; its buffer is free again unless kept.
  void reap_one() {
    io_uring_cqe* cqe = nullptr;
    int waited = io_uring_wait_cqe(&ring_, &cqe);
    while (waited == -EINTR) waited = io_uring_wait_cqe(&ring_, &cqe);
    if (waited < 0) {
      // The ring is broken: nothing more completes through it, and no
      // buffer is reused while the kernel may still read it.
      if (error_ == 0) error_ = -waited;
      pending_ = 0;
      return;
    }
    const int index = static_cast<int>(io_uring_cqe_get_data64(cqe));
    const int result = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    const InFlight& write = writes_[index];
    if (result < 0) {
      if (error_ == 0) error_ = -result;
    } else if (result < write.bytes) {
      write_fully(index, result, write.offset, write.bytes);
    }
    if (!write.keep) free_.push_back(index);
    --pending_;
  }

  void wait_all() {
    while (ring_ok_ && pending_ > 0) reap_one();
  }

  // A buffer no write holds, waiting for one if need be; -1 after a failure.
  int take_free_buffer() {
    while (free_.empty() && pending_ > 0) reap_one();
    if (free_.empty()) return -1;
    const int index = free_.back();
    free_.pop_back();
    return index;
  }

  int fd_;
  const int64_t block_;
  const int depth_;
  bool direct_ = false;
  bool ring_ok_ = false;
  io_uring ring_{};
  std::vector<std::unique_ptr<char, AlignedFree>> buffers_;
  std::vector<int> free_;
  std::vector<InFlight> writes_;  // per buffer: its write in flight
  int pending_ = 0;
  int current_ = -1;    // the buffer being filled
  int64_t filled_ = 0;  // bytes in it
  int64_t offset_ = 0;  // where the next submitted block goes
  int error_ = 0;
};

}  // namespace

std::unique_ptr<WritableFile> make_uring_writable_file(int fd, const LargeFileOptions& options) {
  return std::make_unique<UringWritableFile>(fd, options);
}

LargeFileMode large_file_mode(const WritableFile& file) {
  const auto* uring = dynamic_cast<const UringWritableFile*>(&file);
  return uring != nullptr ? uring->mode() : LargeFileMode{};
}

}  // namespace dslaunch::core
