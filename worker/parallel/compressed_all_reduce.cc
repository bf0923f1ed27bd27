#include "worker/parallel/compressed_all_reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace dslaunch::worker {
namespace {

constexpr int64_t kScaleBytes = sizeof(float);

float scale_of(kernels::Backend& backend, const float* x, int64_t count) {
  return static_cast<float>(std::sqrt(backend.sum_of_squares(x, count)) /
                            std::sqrt(static_cast<double>(count)));
}

float scale_in(const uint8_t* block) {
  float scale = 0;
  std::memcpy(&scale, block, sizeof scale);
  return scale;
}

// The eight ±1 a byte of signs stands for, first element in its high bit:
// decoding multiplies a whole byte's eight by the scale at once (±1 × s is
// ±s exactly), which the compiler vectorises, where bit tests would not.
struct SignTable {
  float values[256][8];
  SignTable() {
    for (int byte = 0; byte < 256; ++byte) {
      for (int b = 0; b < 8; ++b) values[byte][b] = (byte >> (7 - b)) & 1 ? 1.0f : -1.0f;
    }
  }
};
const SignTable kSigns;

// out[i] = ±value for the signs of elements [0, count) (count a multiple of 8).
void decode(const uint8_t* signs, int64_t count, float value, float* out) {
  for (int64_t byte = 0; byte < count / 8; ++byte) {
    const float* sign = kSigns.values[signs[byte]];
    for (int b = 0; b < 8; ++b) out[byte * 8 + b] = sign[b] * value;
  }
}
// The same, added: out[i] += ±value.
void decode_add(const uint8_t* signs, int64_t count, float value, float* out) {
  for (int64_t byte = 0; byte < count / 8; ++byte) {
    const float* sign = kSigns.values[signs[byte]];
    for (int b = 0; b < 8; ++b) out[byte * 8 + b] += sign[b] * value;
  }
}

}  // namespace

int64_t CompressedAllReduce::padded_size(int64_t count, int ranks) {
  // Chunks of whole bytes: a multiple of size x lcm(size, 8), as DeepSpeed pads.
  const int64_t multiple = int64_t{ranks} * std::lcm(int64_t{ranks}, int64_t{8});
  return (count + multiple - 1) / multiple * multiple;
}

CompressedAllReduce::CompressedAllReduce(comm::Communicator& comm, kernels::Backend& backend,
                                         std::vector<int64_t> segments)
    : comm_(comm), backend_(backend) {
  const int ranks = comm_.size();
  int64_t worker = 0, server = 0, largest_chunk = 0;
  for (const int64_t count : segments) {
    Segment segment;
    segment.begin = count_;
    segment.count = count;
    segment.padded = padded_size(count, ranks);
    segment.chunk = segment.padded / ranks;
    segment.worker_error = worker;
    segment.server_error = server;
    segment.block_offset = block_bytes_;
    segments_.push_back(segment);
    count_ += count;
    worker += segment.padded;
    server += segment.chunk;
    block_bytes_ += kScaleBytes + segment.chunk / 8;
    largest_chunk = std::max(largest_chunk, segment.chunk);
  }
  if (ranks == 1) return;
  worker_error_.assign(worker, 0.0f);
  server_error_.assign(server, 0.0f);
  server_sum_.resize(largest_chunk);
  send_.resize(ranks * block_bytes_);
  received_.resize(send_.size());
}

void CompressedAllReduce::reset_errors() {
  std::fill(worker_error_.begin(), worker_error_.end(), 0.0f);
  std::fill(server_error_.begin(), server_error_.end(), 0.0f);
}

void CompressedAllReduce::compress(const float* x, int64_t count, float scale, uint8_t* out,
                                   float* error) {
  std::memcpy(out, &scale, sizeof scale);
  uint8_t* signs = out + kScaleBytes;
  // NaN and -0 count as non-negative, as sign() + 1 > 0 does in DeepSpeed.
  // The signs first, then the error, which may overwrite x: two simple
  // loops the compiler vectorises.
  for (int64_t byte = 0; byte < count / 8; ++byte) {
    const float* v = x + byte * 8;
    unsigned bits = 0;
    for (int b = 0; b < 8; ++b) bits |= static_cast<unsigned>(!(v[b] < 0.0f)) << (7 - b);
    signs[byte] = static_cast<uint8_t>(bits);
  }
  for (int64_t i = 0; i < count; ++i) error[i] = x[i] - (x[i] < 0.0f ? -scale : scale);
}

core::Status CompressedAllReduce::average(float* buffer) {
  const int size = comm_.size();
  if (size == 1) return {};
  const int rank = comm_.rank();

  // Worker: compensate each segment, compress each chunk for its server.
  for (const Segment& segment : segments_) {
    float* x = worker_error_.data() + segment.worker_error;
    const float* in = buffer + segment.begin;
    for (int64_t i = 0; i < segment.count; ++i) x[i] = in[i] + x[i];
    const float scale = scale_of(backend_, x, segment.padded);
    const int64_t chunk = segment.chunk;
    for (int r = 0; r < size; ++r) {
      compress(x + r * chunk, chunk, scale, send_.data() + r * block_bytes_ + segment.block_offset,
               x + r * chunk);
    }
  }
  if (core::Status status =
          comm::wait_for(*comm_.all_to_all(comm::buffer_of(send_.data(), send_.size()),
                                           comm::buffer_of(received_.data(), received_.size())),
                         "compressed all-reduce, worker signs");
      !status.ok()) {
    return status;
  }

  // Server of chunk `rank` of each segment: the workers' mean, added in rank
  // order, compensated, compressed into this rank's block of received_
  // (consumed by then), which is gathered in place.
  const float inverse_size = 1.0f / static_cast<float>(size);
  uint8_t* own = received_.data() + rank * block_bytes_;
  for (const Segment& segment : segments_) {
    const int64_t chunk = segment.chunk;
    float* sum = server_sum_.data();
    for (int w = 0; w < size; ++w) {
      const uint8_t* from = received_.data() + w * block_bytes_ + segment.block_offset;
      const float value = scale_in(from) * inverse_size;
      const uint8_t* signs = from + kScaleBytes;
      if (w == 0) {
        decode(signs, chunk, value, sum);
      } else {
        decode_add(signs, chunk, value, sum);
      }
    }
    float* y = server_error_.data() + segment.server_error;
    for (int64_t k = 0; k < chunk; ++k) y[k] = sum[k] + y[k];
    compress(y, chunk, scale_of(backend_, y, chunk), own + segment.block_offset, y);
  }
  if (core::Status status = comm::wait_for(
          *comm_.all_gather(comm::buffer_of(own, block_bytes_),
                            comm::buffer_of(received_.data(), received_.size()),
                            comm::Blocks::consecutive(std::vector<int64_t>(size, block_bytes_))),
          "compressed all-reduce, server signs");
      !status.ok()) {
    return status;
  }

  for (const Segment& segment : segments_) {
    const int64_t chunk = segment.chunk;
    for (int r = 0; r < size; ++r) {
      const int64_t begin = r * chunk;
      const int64_t end = std::min(segment.count, begin + chunk);
      if (end <= begin) continue;
      const uint8_t* from = received_.data() + r * block_bytes_ + segment.block_offset;
      const float scale = scale_in(from);
      const uint8_t* signs = from + kScaleBytes;
      float* out = buffer + segment.begin + begin;
      // Whole bytes straight into the buffer; a segment's last few floats
      // (its padding follows) through a byte's worth of scratch.
      const int64_t whole = (end - begin) / 8 * 8;
      decode(signs, whole, scale, out);
      if (whole < end - begin) {
        float last[8];
        decode(signs + whole / 8, 8, scale, last);
        std::copy(last, last + (end - begin - whole), out + whole);
      }
    }
  }
  return {};
}

}  // namespace dslaunch::worker
