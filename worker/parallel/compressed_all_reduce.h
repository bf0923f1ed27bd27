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
// an fp32 all-reduce.
//
// The buffer is cut into consecutive segments (a model's tensors, or one for
// the whole), each compressed as DeepSpeed compresses one tensor, with its
// own scales and error feedback; all segments travel in the same two
// messages. For each segment, each rank is the "server" of one chunk of it:
//
// 1. Worker: x = the segment (zero-padded to its padded size P) + its
//    worker error; scale = ||x|| / sqrt(P); x is sent as its signs (a 1 bit
//    for x >= 0, packed 8 per byte, first element in the high bit) and
//    `scale`, and worker error = x - (±scale). Chunk r of the signs, with
//    the scale in front, goes to rank r (one all-to-all for all segments).
// 2. Server r: y = Σ over workers w in rank order of ±(scale_w × (1/size))
//    from w's signs of chunk r, + server error; its own scale
//    ||y|| / sqrt(P / size), signs and server error = y - (±scale) the same
//    way; every server's signs and scale are all-gathered (one all-gather
//    for all segments), and element i of chunk r of the result is ±scale_r.
//
// Segments are padded to a multiple of size × lcm(size, 8), so every chunk
// is whole bytes. The norms are the backend's sum_of_squares (accumulated in
// double), a scale the float nearest to sqrt(sum) / sqrt(count). The error
// buffers are this rank's state across calls: checkpoints keep them. On one
// rank average() leaves the buffer alone, as DeepSpeed does.
class CompressedAllReduce {
 public:
  // Averages buffers made of consecutive segments of `segments` floats each
  // over `comm` (which must outlive this object, and see the same calls in
  // the same order on every rank).
  CompressedAllReduce(comm::Communicator& comm, kernels::Backend& backend,
                      std::vector<int64_t> segments);

  static int64_t padded_size(int64_t count, int ranks);
  int64_t count() const { return count_; }

  // buffer[0, count()) becomes the compressed mean over the ranks.
  core::Status average(float* buffer);

  // Each segment's padded floats, and its chunk's, one after the other;
  // zeros at first.
  std::vector<float>& worker_error() { return worker_error_; }
  std::vector<float>& server_error() { return server_error_; }
  const std::vector<float>& worker_error() const { return worker_error_; }
  const std::vector<float>& server_error() const { return server_error_; }
  void reset_errors();
  // Bytes of its message and scratch buffers (the errors aside).
  int64_t buffer_bytes() const {
    return static_cast<int64_t>(server_sum_.size() * sizeof(float) + send_.size() +
                                received_.size());
  }

 private:
  struct Segment {
    int64_t begin = 0;  // in the buffer
    int64_t count = 0;
    int64_t padded = 0;
    int64_t chunk = 0;         // padded / size
    int64_t worker_error = 0;  // where its worker error starts
    int64_t server_error = 0;  // where its chunk's server error starts
    int64_t block_offset = 0;  // of its scale and signs in a rank's block
  };
  // Writes `scale` and the packed signs of x[0, count) (count a multiple of
  // 8) into `out`, and error[i] = x[i] - (±scale) (error may be x).
  static void compress(const float* x, int64_t count, float scale, uint8_t* out, float* error);

  comm::Communicator& comm_;
  kernels::Backend& backend_;
  std::vector<Segment> segments_;
  int64_t count_ = 0;
  int64_t block_bytes_ = 0;  // what one rank sends another: every segment's scale and chunk
  std::vector<float> worker_error_;
  std::vector<float> server_error_;
  std::vector<float> server_sum_;  // the largest chunk: the workers' mean
  std::vector<uint8_t> send_;      // size() blocks
  std::vector<uint8_t> received_;  // size() blocks
};

}  // namespace dslaunch::worker
