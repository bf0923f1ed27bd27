#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kernels/backend.h"
#include "worker/comm/communicator.h"

namespace dslaunch::worker {

// The error-compensated 1-bit all-reduce of 1-bit Adam, 0/1 Adam and 1-bit
// LAMB (DeepSpeed's compressed_allreduce): every rank's buffer becomes the
// same approximation of the mean over ranks, at about 1/32 of the bytes of
// an fp32 all-reduce. Two rounds, each rank the "server" of one chunk:
//
// 1. Worker: x = buffer (zero-padded to padded_size()) + worker error;
//    scale = ||x|| / sqrt(padded_size()); x is sent as its signs (a 1 bit
//    for x >= 0, packed 8 per byte, first element in the high bit) and
//    `scale`, and worker error = x - (±scale). Chunk r of the signs, with
//    the scale in front, goes to rank r (an all-to-all).
// 2. Server r: y = Σ over workers w in rank order of ±(scale_w × (1/size))
//    from w's signs of chunk r, + server error; its own scale
//    ||y|| / sqrt(chunk_size()), signs and server error = y - (±scale) the
//    same way; every server's signs and scale are all-gathered, and element
//    i of chunk r of the result is ±scale_r.
//
// Sizes are padded to a multiple of size × lcm(size, 8), so every chunk is
// whole bytes. The norms are the backend's sum_of_squares (accumulated in
// double), the scale the float nearest to sqrt(sum) / sqrt(count). The
// error buffers are this rank's state across calls: checkpoints keep them.
// On one rank average() leaves the buffer alone, as DeepSpeed does.
class CompressedAllReduce {
 public:
  // Averages buffers of `count` floats over `comm` (which must outlive this
  // object, and see the same calls in the same order on every rank).
  CompressedAllReduce(comm::Communicator& comm, kernels::Backend& backend, int64_t count);

  static int64_t padded_size(int64_t count, int ranks);
  int64_t count() const { return count_; }
  int64_t padded_size() const { return static_cast<int64_t>(worker_error_.size()); }
  int64_t chunk_size() const { return static_cast<int64_t>(server_error_.size()); }

  // buffer[0, count) becomes the compressed mean over the ranks.
  core::Status average(float* buffer);

  // padded_size() and chunk_size() floats; zeros at first.
  std::vector<float>& worker_error() { return worker_error_; }
  std::vector<float>& server_error() { return server_error_; }
  void reset_errors();

 private:
  // Bytes of one rank's block: its scale, then its chunk's signs.
  int64_t block_bytes() const;
  // Writes `scale` and the packed signs of x[0, count) (count a multiple of
  // 8) into `block`, and error[i] = x[i] - (±scale) (error may be x).
  static void compress(const float* x, int64_t count, float scale, uint8_t* block, float* error);

  comm::Communicator& comm_;
  kernels::Backend& backend_;
  const int64_t count_;
  std::vector<float> worker_error_;
  std::vector<float> server_error_;
  std::vector<float> server_sum_;  // chunk_size(): the workers' mean
  std::vector<uint8_t> send_;      // size() blocks
  std::vector<uint8_t> received_;  // size() blocks
};

}  // namespace dslaunch::worker
