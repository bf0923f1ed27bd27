#include "worker/parallel/partition_swap.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace dslaunch::worker {
namespace {

constexpr int64_t kPage = core::SwapFile::kSwapAlignment;
constexpr int64_t kFloat = static_cast<int64_t>(sizeof(float));

}  // namespace

void PartitionSwap::Free::operator()(char* p) const { std::free(p); }

core::StatusOr<std::unique_ptr<PartitionSwap>> PartitionSwap::create(const std::string& folder,
                                                                     int64_t own_begin,
                                                                     int64_t own_end,
                                                                     const core::SwapFile::Io& io,
                                                                     int64_t piece_floats) {
  if (piece_floats <= 0 || piece_floats % (kPage / kFloat) != 0) {
    return core::internal_error("offloaded parameters: pieces must be whole pages");
  }
  core::StatusOr<std::unique_ptr<core::SwapFile>> file = core::SwapFile::create(folder, io);
  if (!file.ok()) return file.status();
  return std::unique_ptr<PartitionSwap>(
      new PartitionSwap(std::move(*file), own_begin, own_end, piece_floats));
}

PartitionSwap::PartitionSwap(std::unique_ptr<core::SwapFile> file, int64_t own_begin,
                             int64_t own_end, int64_t piece_floats)
    : file_(std::move(file)),
      own_begin_(own_begin),
      own_end_(own_end),
      piece_floats_(piece_floats) {}

std::pair<int64_t, int64_t> PartitionSwap::extent(int64_t begin, int64_t end) const {
  const int64_t first = (begin - own_begin_) * kFloat / kPage * kPage;
  const int64_t last = ((end - own_begin_) * kFloat + kPage - 1) / kPage * kPage;
  return {first, last};
}

core::Status PartitionSwap::reserve_staging(int64_t bytes) {
  if (bytes <= staging_capacity_) return {};
  void* memory = nullptr;
  if (posix_memalign(&memory, kPage, static_cast<size_t>(bytes)) != 0) {
    return core::Status(
        core::StatusCode::kResourceExhausted,
        fmt::format("cannot allocate {} bytes to stage offloaded parameters", bytes));
  }
  staging_.reset(static_cast<char*>(memory));
  staging_capacity_ = bytes;
  return {};
}

int64_t PartitionSwap::staging_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return staging_capacity_;
}

template <typename Transfer>
core::Status PartitionSwap::in_pieces(int64_t begin, int64_t end, const Transfer& transfer) {
  for (int64_t from = begin; from < end;) {
    // The next piece ends on a page boundary of the file (or at `end`).
    const int64_t to =
        std::min(end, own_begin_ + ((from - own_begin_) / piece_floats_ + 1) * piece_floats_);
    if (core::Status status = transfer(from, to); !status.ok()) return status;
    from = to;
  }
  return {};
}

core::Status PartitionSwap::load(int64_t begin, int64_t end, float* out) {
  if (begin >= end) return {};
  if (begin < own_begin_ || end > own_end_) {
    return core::internal_error("offloaded parameters: a load outside the rank's partition");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return in_pieces(begin, end, [&](int64_t from, int64_t to) {
    return load_piece(from, to, out + (from - begin));
  });
}

core::Status PartitionSwap::load_piece(int64_t begin, int64_t end, float* out) {
  const auto [first, last] = extent(begin, end);
  if (last > file_bytes_) {
    return core::internal_error("offloaded parameters: a load of floats never stored");
  }
  if (core::Status status = reserve_staging(last - first); !status.ok()) return status;
  if (core::Status status = file_->wait(file_->start_read(staging_.get(), last - first, first));
      !status.ok()) {
    return status.with_context("reading offloaded parameters");
  }
  std::memcpy(out, staging_.get() + ((begin - own_begin_) * kFloat - first),
              static_cast<size_t>((end - begin) * kFloat));
  return {};
}

core::Status PartitionSwap::store(int64_t begin, int64_t end, const float* in) {
  if (begin >= end) return {};
  if (begin < own_begin_ || end > own_end_) {
    return core::internal_error("offloaded parameters: a store outside the rank's partition");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return in_pieces(begin, end, [&](int64_t from, int64_t to) {
    return store_piece(from, to, in + (from - begin));
  });
}

core::Status PartitionSwap::store_piece(int64_t begin, int64_t end, const float* in) {
  const auto [first, last] = extent(begin, end);
  if (core::Status status = reserve_staging(last - first); !status.ok()) return status;
  // The pages at the ends hold floats outside the range: read them first.
  const int64_t head = (begin - own_begin_) * kFloat - first;
  const int64_t tail = last - (end - own_begin_) * kFloat;
  const auto read_page = [&](int64_t offset) -> core::Status {
    char* page = staging_.get() + (offset - first);
    if (offset >= file_bytes_) {  // never written: the file ends before it
      std::memset(page, 0, kPage);
      return {};
    }
    return file_->wait(file_->start_read(page, kPage, offset));
  };
  core::Status status;
  if (head > 0) status = read_page(first);
  if (status.ok() && tail > 0 && (last - kPage > first || head == 0))
    status = read_page(last - kPage);
  if (!status.ok()) return status.with_context("reading offloaded parameters");
  std::memcpy(staging_.get() + head, in, static_cast<size_t>((end - begin) * kFloat));
  status = file_->wait(file_->start_write(staging_.get(), last - first, first));
  if (status.ok()) file_bytes_ = std::max(file_bytes_, last);
  return status.with_context("writing offloaded parameters");
}

}  // namespace dslaunch::worker
