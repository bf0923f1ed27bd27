#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"
#include "core/swap_file.h"

namespace dslaunch::worker {

// A rank's partition of the flat parameters kept in a swap file on a fast
// drive (ZeRO-Infinity's offload_param device nvme) and paged in and out a
// range of floats at a time. Floats [own_begin, own_end) of the layout are
// the file's. Ranges need no
// alignment: whole 4 KiB pages move through an aligned staging buffer, the
// pages at a range's ends read first when written, so the floats around a
// range stay as they were. Every call waits for its transfer. Thread-safe
// (one transfer at a time): ZeRO stage 3's communication thread loads a
// block's floats just before gathering it while the compute thread may
// store others.
class PartitionSwap {
 public:
  // The file in `folder`, created and unlinked at once. Longer ranges move
  // in pieces of `piece_floats` (a multiple of 1024: pieces start on pages),
  // so the staging buffer holds one piece (8 MiB by default).
  // `io`: how the file's transfers go to the drive (the spec's aio).
  static core::StatusOr<std::unique_ptr<PartitionSwap>> create(
      const std::string& folder, int64_t own_begin, int64_t own_end,
      const core::SwapFile::Io& io = {}, int64_t piece_floats = int64_t{2} << 20);

  // out[0, end - begin) = the file's floats [begin, end) (of the layout,
  // within the partition).
  core::Status load(int64_t begin, int64_t end, float* out);
  // The file's floats [begin, end) = in[0, end - begin).
  core::Status store(int64_t begin, int64_t end, const float* in);

  int64_t staging_bytes() const;

 private:
  PartitionSwap(std::unique_ptr<core::SwapFile> file, int64_t own_begin, int64_t own_end,
                int64_t piece_floats);
  // The page-aligned byte extent of the file holding floats [begin, end).
  std::pair<int64_t, int64_t> extent(int64_t begin, int64_t end) const;
  core::Status reserve_staging(int64_t bytes);
  // transfer(from, to) over [begin, end) in pieces; the lock held.
  template <typename Transfer>
  core::Status in_pieces(int64_t begin, int64_t end, const Transfer& transfer);
  core::Status load_piece(int64_t begin, int64_t end, float* out);
  core::Status store_piece(int64_t begin, int64_t end, const float* in);

  std::unique_ptr<core::SwapFile> file_;
  int64_t own_begin_;
  int64_t own_end_;
  int64_t piece_floats_;
  mutable std::mutex mutex_;
  struct Free {
    void operator()(char* p) const;
  };
  std::unique_ptr<char, Free> staging_;
  int64_t staging_capacity_ = 0;
  int64_t file_bytes_ = 0;  // written so far (the file's end)
};

}  // namespace dslaunch::worker
