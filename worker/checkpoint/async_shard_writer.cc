#include "worker/checkpoint/async_shard_writer.h"

#include <algorithm>
#include <cstring>

namespace dslaunch::worker::checkpoint {

const void* AsyncShardWriter::Buffer::hold(const void* source, size_t bytes) {
  if (bytes > capacity) {
    // Uninitialised: the copy below is the first touch of every page.
    data.reset(new char[bytes]);
    capacity = bytes;
  }
  // The training thread waits for this copy: it is spread over the compute
  // threads (one core's memcpy does not saturate the memory bus).
  constexpr size_t kChunk = size_t{4} << 20;
  const auto chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
  char* to = data.get();
  const char* from = static_cast<const char*>(source);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kChunk;
    std::memcpy(to + begin, from + begin, std::min(kChunk, bytes - begin));
  }
  return data.get();
}

AsyncShardWriter::AsyncShardWriter() : thread_([this] { run(); }) {}

AsyncShardWriter::~AsyncShardWriter() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !in_flight_; });
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void AsyncShardWriter::save(const std::string& path, const core::ShardHeader& header,
                            const std::vector<core::ShardArrayData>& arrays, Done done) {
  save(path, header, arrays, {}, std::move(done));
}

void AsyncShardWriter::save(const std::string& path, const core::ShardHeader& header,
                            const std::vector<core::ShardArrayData>& arrays,
                            const std::vector<const void*>& rank_arrays, Done done,
                            Hold hold) {
  wait();
  if (std::any_of(arrays.begin(), arrays.end(),
                  [](const core::ShardArrayData& array) { return bool(array.read); })) {
    const core::WrittenShard written = core::write_shard(path, header, arrays, rank_arrays);
    if (done) done(written);
    return;
  }
  const bool borrow = hold == Hold::kBorrow;
  // Nothing is in flight, so the background thread leaves the buffers alone.
  const int64_t count = std::max<int64_t>(header.end - header.begin, 0);
  if (buffers_.size() < arrays.size()) buffers_.resize(arrays.size());
  arrays_.clear();
  for (size_t i = 0; i < arrays.size(); ++i) {
    const size_t bytes = static_cast<size_t>(count * core::dtype_bytes(arrays[i].info.dtype));
    arrays_.push_back(
        {arrays[i].info, borrow ? arrays[i].data : buffers_[i].hold(arrays[i].data, bytes)});
  }
  // As many pointers as the caller gave, so that write_shard reports a
  // mismatch with the header; only those the header sizes are copied.
  const std::vector<core::RankStateArray> no_state;
  const std::vector<core::RankStateArray>& state =
      header.rank_state ? header.rank_state->arrays : no_state;
  if (rank_buffers_.size() < rank_arrays.size()) rank_buffers_.resize(rank_arrays.size());
  rank_arrays_.assign(rank_arrays.size(), nullptr);
  for (size_t i = 0; i < rank_arrays.size() && i < state.size(); ++i) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(state[i].count, 0) *
                                             core::dtype_bytes(state[i].dtype));
    rank_arrays_[i] = borrow ? rank_arrays[i] : rank_buffers_[i].hold(rank_arrays[i], bytes);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    path_ = path;
    header_ = header;
    done_ = std::move(done);
    in_flight_ = true;
    borrowed_ = borrow;
  }
  changed_.notify_all();
}

void AsyncShardWriter::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !in_flight_; });
}

void AsyncShardWriter::release() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !in_flight_ || !borrowed_; });
}

void AsyncShardWriter::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return in_flight_ || stopping_; });
    if (!in_flight_) return;
    lock.unlock();
    const core::WrittenShard written = core::write_shard(path_, header_, arrays_, rank_arrays_);
    if (done_) done_(written);
    done_ = nullptr;
    lock.lock();
    in_flight_ = false;
    changed_.notify_all();
  }
}

}  // namespace dslaunch::worker::checkpoint
