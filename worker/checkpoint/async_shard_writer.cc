#include "worker/checkpoint/async_shard_writer.h"

#include <algorithm>

namespace dslaunch::worker::checkpoint {

float* AsyncShardWriter::Buffer::hold(const float* source, size_t count) {
  if (count > capacity) {
    // Uninitialised: the copy below is the first touch of every page.
    data.reset(new float[count]);
    capacity = count;
  }
  if (count > 0) std::copy(source, source + count, data.get());
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
                            const core::ShardArrays& arrays, Done done) {
  wait();
  // Nothing is in flight, so the background thread leaves the buffers alone.
  const size_t count = static_cast<size_t>(std::max<int64_t>(header.end - header.begin, 0));
  params_.hold(arrays.params, count);
  adam_m_.hold(arrays.adam_m, count);
  adam_v_.hold(arrays.adam_v, count);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    path_ = path;
    header_ = header;
    done_ = std::move(done);
    in_flight_ = true;
  }
  changed_.notify_all();
}

void AsyncShardWriter::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !in_flight_; });
}

void AsyncShardWriter::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return in_flight_ || stopping_; });
    if (!in_flight_) return;
    lock.unlock();
    const core::WrittenShard written =
        core::write_shard(path_, header_, {params_.data.get(), adam_m_.data.get(), adam_v_.data.get()});
    if (done_) done_(written);
    done_ = nullptr;
    lock.lock();
    in_flight_ = false;
    changed_.notify_all();
  }
}

}  // namespace dslaunch::worker::checkpoint
