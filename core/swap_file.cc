#include "core/swap_file.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/errno_status.h"

namespace dslaunch::core {

struct SwapFile::Ring {
  ::io_uring ring{};
  unsigned depth = 0;
  // One request: a block of a transfer.
  struct Request {
    Ticket ticket = 0;
    bool write = false;
    char* buffer = nullptr;
    int64_t bytes = 0;
    int64_t offset = 0;
  };
  uint64_t next_request = 0;
  std::map<uint64_t, Request> in_flight;
  std::map<Ticket, int64_t> pending;  // requests of each transfer not yet complete
  std::set<Ticket> done;  // completed out of order, above completed_below_
  bool initialised = false;
  ~Ring() {
    if (initialised) io_uring_queue_exit(&ring);
  }
};

StatusOr<std::unique_ptr<SwapFile>> SwapFile::create(const std::string& folder, const Io& io) {
  if (io.block_size < kSwapAlignment || io.block_size % kSwapAlignment != 0 ||
      io.queue_depth < 1) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("swap file I/O: block size {} (a multiple of {} is needed) and "
                              "queue depth {} (at least 1)",
                              io.block_size, kSwapAlignment, io.queue_depth));
  }
  std::string path = folder + "/dslaunch-swap-XXXXXX";
  const int fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) {
    return Status(StatusCode::kIoError,
                  fmt::format("cannot create a swap file in '{}': {}", folder, errno_text(errno)));
  }
  // Gone from the folder at once: the space returns when the process ends.
  ::unlink(path.c_str());
  const int flags = ::fcntl(fd, F_GETFL);
  const bool direct = flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_DIRECT) == 0;
  auto ring = std::make_unique<Ring>();
  ring->depth = static_cast<unsigned>(io.queue_depth);
  ring->initialised = io_uring_queue_init(ring->depth, &ring->ring, 0) == 0;
  if (!ring->initialised) ring = nullptr;  // pread and pwrite instead
  return std::unique_ptr<SwapFile>(new SwapFile(fd, direct, std::move(ring), folder, io));
}

SwapFile::SwapFile(int fd, bool direct, std::unique_ptr<Ring> ring, std::string folder,
                   const Io& io)
    : fd_(fd), direct_(direct), ring_(std::move(ring)), folder_(std::move(folder)), io_(io) {}

SwapFile::~SwapFile() {
  (void)wait_all();
  ring_.reset();
  ::close(fd_);
}

void SwapFile::fail(int error_number, const char* what) {
  if (error_.ok()) {
    error_ = Status(StatusCode::kIoError, fmt::format("{} the swap file in '{}': {}", what, folder_,
                                                      errno_text(error_number)));
  }
}

SwapFile::Ticket SwapFile::start_read(void* buffer, int64_t bytes, int64_t offset) {
  return start(false, buffer, bytes, offset);
}

SwapFile::Ticket SwapFile::start_write(const void* buffer, int64_t bytes, int64_t offset) {
  return start(true, const_cast<void*>(buffer), bytes, offset);
}

SwapFile::Ticket SwapFile::start(bool write, void* buffer, int64_t bytes, int64_t offset) {
  const Ticket ticket = next_ticket_++;
  char* data = static_cast<char*>(buffer);
  // Without io_uring, or after a failure, the transfer happens now.
  const auto transfer_now = [&](int64_t done) {
    while (done < bytes && error_.ok()) {
      const ssize_t n = write ? ::pwrite(fd_, data + done, bytes - done, offset + done)
                              : ::pread(fd_, data + done, bytes - done, offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fail(n < 0 ? errno : EIO, write ? "writing" : "reading");
        break;
      }
      done += n;
    }
  };
  if (ring_ == nullptr || !error_.ok()) {
    transfer_now(0);
    if (ring_ != nullptr) ring_->done.insert(ticket);
    if (ring_ == nullptr) completed_below_ = next_ticket_;
    return ticket;
  }
  const auto submit = [this] {
    if (const int submitted = io_uring_submit(&ring_->ring); submitted < 0) {
      fail(-submitted, "submitting to");
    }
  };
  // The transfer's requests not yet complete; those never issued (after a
  // failure) are taken off at the end.
  int64_t unissued = (bytes + io_.block_size - 1) / io_.block_size;
  ring_->pending[ticket] = unissued;
  for (int64_t at = 0; at < bytes && error_.ok(); at += io_.block_size) {
    // At most queue_depth requests in flight: what was prepared goes out,
    // and a request completes.
    while (in_flight_ >= io_.queue_depth && error_.ok()) {
      submit();
      reap_one();
    }
    io_uring_sqe* sqe = error_.ok() ? io_uring_get_sqe(&ring_->ring) : nullptr;
    if (sqe == nullptr && error_.ok()) {
      submit();
      sqe = io_uring_get_sqe(&ring_->ring);
      if (sqe == nullptr) fail(EBUSY, "submitting to");
    }
    if (sqe == nullptr) break;
    const int64_t length = std::min(io_.block_size, bytes - at);
    const uint64_t request = ring_->next_request++;
    if (write) {
      io_uring_prep_write(sqe, fd_, data + at, static_cast<unsigned>(length),
                          static_cast<__u64>(offset + at));
    } else {
      io_uring_prep_read(sqe, fd_, data + at, static_cast<unsigned>(length),
                         static_cast<__u64>(offset + at));
    }
    io_uring_sqe_set_data64(sqe, request);
    ring_->in_flight[request] = {ticket, write, data + at, length, offset + at};
    ++in_flight_;
    --unissued;
    if (io_.single_submit) submit();
  }
  if (!io_.single_submit) submit();
  const auto pending = ring_->pending.find(ticket);
  if (pending != ring_->pending.end() && (pending->second -= unissued) == 0) {
    ring_->pending.erase(pending);
    ring_->done.insert(ticket);
  }
  return ticket;
}

void SwapFile::reap_one() {
  io_uring_cqe* cqe = nullptr;
  int waited = io_uring_wait_cqe(&ring_->ring, &cqe);
  while (waited == -EINTR) waited = io_uring_wait_cqe(&ring_->ring, &cqe);
  if (waited < 0) {
    // Nothing more completes through the ring: the transfers in flight are
    // lost, and the file's contents with them.
    fail(-waited, "waiting on");
    for (const auto& [request, transfer] : ring_->in_flight) ring_->done.insert(transfer.ticket);
    ring_->in_flight.clear();
    ring_->pending.clear();
    in_flight_ = 0;
    return;
  }
  const uint64_t request = io_uring_cqe_get_data64(cqe);
  const int result = cqe->res;
  io_uring_cqe_seen(&ring_->ring, cqe);
  const Ring::Request transfer = ring_->in_flight.at(request);
  ring_->in_flight.erase(request);
  --in_flight_;
  if (result < 0) {
    fail(-result, transfer.write ? "writing" : "reading");
  } else if (result < transfer.bytes) {
    // A short transfer: the rest now, in place.
    int64_t done = result;
    while (done < transfer.bytes && error_.ok()) {
      const ssize_t n =
          transfer.write
              ? ::pwrite(fd_, transfer.buffer + done, transfer.bytes - done, transfer.offset + done)
              : ::pread(fd_, transfer.buffer + done, transfer.bytes - done, transfer.offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fail(n < 0 ? errno : EIO, transfer.write ? "writing" : "reading");
        break;
      }
      done += n;
    }
  }
  const auto pending = ring_->pending.find(transfer.ticket);
  if (pending != ring_->pending.end() && --pending->second == 0) {
    ring_->pending.erase(pending);
    ring_->done.insert(transfer.ticket);
  }
}

Status SwapFile::wait(Ticket ticket) {
  if (ring_ != nullptr) {
    const auto finished = [&] {
      while (ring_->done.count(completed_below_) != 0) ring_->done.erase(completed_below_++);
      return ticket < completed_below_;
    };
    while (!finished() && in_flight_ > 0) reap_one();
  }
  return error_;
}

Status SwapFile::wait_all() {
  while (ring_ != nullptr && in_flight_ > 0) reap_one();
  return error_;
}

}  // namespace dslaunch::core
