#include "worker/parallel/gradient_reducer.h"

#include <algorithm>
#include <climits>
#include <string>

#include "kernels/half_precision.h"
#include "worker/parallel/block_quantizer.h"
#include "worker/parallel/gradient_buckets.h"

#if defined(__SSE2__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif


namespace dslaunch::worker {
namespace {

constexpr const char* kWhat = "gradient reducer";

// The communication thread divides the summed gradients;
// like the compute threads it flushes denormals, which are both slow and
// flushed everywhere else.
void flush_denormals_on_this_thread() {
#if defined(__SSE2__)
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#endif
}

std::string range_text(int64_t begin, int64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

uint16_t narrowed(float value, core::DType dtype) {
  return dtype == core::DType::kBF16 ? kernels::float_to_bf16(value)
                                     : kernels::float_to_fp16(value);
}
float widened(uint16_t value, core::DType dtype) {
  return dtype == core::DType::kBF16 ? kernels::bf16_to_float(value)
                                     : kernels::fp16_to_float(value);
}

// Waits for `works` in order, so a hang names the first that never completed.
core::Status wait_in_order(std::vector<std::unique_ptr<comm::Work>>& works,
                           const std::string& context) {
  for (const auto& work : works) {
    if (core::Status status = work->wait().with_context(context); !status.ok()) return status;
  }
  return {};
}

// Sizes a buffer for the bucket at hand, allocated once at the most any
// bucket needs: its memory is then the same whatever order buckets of
// different sizes come in (what buffer_bytes() reports and the plan
// estimates), and never reallocated.
template <typename T>
void resize_within(std::vector<T>& buffer, int64_t size, int64_t most) {
  buffer.reserve(static_cast<size_t>(std::max(size, most)));
  buffer.resize(static_cast<size_t>(size));
}

}  // namespace

GradientReducer::GradientReducer(comm::Communicator& comm, float* grads, int64_t n,
                                 int64_t bucket_elements)
    : grads_(grads), n_(n) {
  start(comm, bucket_elements);
}

GradientReducer::GradientReducer(comm::Communicator& comm, ReleasableBuffer& workspace,
                                 int64_t bucket_elements, const ZeroPartition& partition,
                                 float* partition_grads)
    : grads_(workspace.data()), n_(workspace.size()) {
  scatter_.emplace();
  scatter_->workspace = &workspace;
  const int64_t own_begin = partition.begin(std::clamp(comm.rank(), 0, partition.ranks - 1));
  if (partition_grads != nullptr) {
    scatter_->add = [partition_grads, own_begin](int64_t begin, int64_t end,
                                                  const AddToShare& fn) {
      fn(partition_grads + (begin - own_begin), 0, end - begin);
      return core::Status();
    };
  }
  shares_.partition = partition;
  start(comm, bucket_elements);
}

GradientReducer::GradientReducer(comm::Communicator& comm, ReleasableBuffer& workspace,
                                 int64_t bucket_elements, const ZeroPartition& partition,
                                 ShareAdder add)
    : grads_(workspace.data()), n_(workspace.size()) {
  scatter_.emplace();
  scatter_->workspace = &workspace;
  scatter_->add = std::move(add);
  shares_.partition = partition;
  start(comm, bucket_elements);
}

void GradientReducer::start(comm::Communicator& comm, int64_t bucket_elements) {
  const int64_t n = n_;
  if (n < 0 || bucket_elements < 1 || (n > 0 && grads_ == nullptr)) {
    setup_error_ = core::invalid_argument(
        std::string(kWhat) + ": needs a buffer of n >= 0 floats and a bucket size >= 1 (got n " +
        std::to_string(n) + ", bucket size " + std::to_string(bucket_elements) + ")");
    return;
  }
  bucket_elements_ = capped_bucket_elements(n, bucket_elements);
  progress_.emplace(n, bucket_elements);

  size_ = comm.size();
  shares_.rank = comm.rank();
  // One rank in all-reduce mode has nothing to cut; in reduce-scatter mode
  // it still moves buckets into its (whole) partition.
  if (size_ == 1 && !scatter_) return;
  if (!scatter_) shares_.partition = make_zero_partition(n_, size_, kZeroPartitionAlignment);
  if (core::Status error = setup_shares(); !error.ok()) {
    setup_error_ = error.with_context(kWhat);
    return;
  }
  if (size_ == 1) return;
  auto duplicate = comm.duplicate("gradients");
  if (!duplicate.ok()) {
    setup_error_ = duplicate.status().with_context(kWhat);
    return;
  }
  comm_ = std::move(duplicate.value());
  thread_ = std::thread([this] { communication_loop(); });
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  launched_or_stopping_.notify_one();
  if (thread_.joinable()) thread_.join();
}

core::Status GradientReducer::setup_shares() {
  const ZeroPartition& partition = shares_.partition;
  if (partition.ranks != size_ || partition.total != n_) {
    return core::invalid_argument(
        "the partition (" + std::to_string(partition.total) + " floats over " +
        std::to_string(partition.ranks) + " ranks) does not cover the workspace (" +
        std::to_string(n_) + " floats) over the communicator's " + std::to_string(size_) +
        " ranks");
  }
  const int rank = shares_.rank;
  if (scatter_) {
    if (scatter_->workspace->data() == nullptr && !scatter_->workspace->status().ok()) {
      return scatter_->workspace->status();
    }
    const int64_t own = partition.end(rank) - partition.begin(rank);
    if (own > 0 && !scatter_->add) {
      return core::invalid_argument("no buffer for this rank's " + std::to_string(own) +
                                    " partition gradients");
    }
  }
  shares_.blocks.counts.assign(size_, 0);
  shares_.blocks.displacements.assign(size_, 0);
  // The largest share of one bucket this rank receives; at least one float
  // so the receive buffer is never null.
  // A part (ready_part) may meet the partition anywhere: up to a bucket's
  // floats of it.
  int64_t largest = std::max<int64_t>(
      1, std::min(bucket_elements_, partition.end(rank) - partition.begin(rank)));
  for (const GradientBucket& bucket : progress_->buckets()) {
    largest = std::max(largest, std::min(bucket.end, partition.end(rank)) -
                                    std::max(bucket.begin, partition.begin(rank)));
  }
  shares_.received.assign(largest, 0.0f);
  return {};
}

void GradientReducer::ready(int64_t begin, int64_t end) {
  if (!setup_error_.ok() || begin == end) return;
  if (core::Status error = progress_->report(begin, end, kWhat); !error.ok()) {
    if (usage_error_.ok()) usage_error_ = std::move(error);
    return;
  }
  const auto [first, last] = progress_->take_complete();
  if (first == last) return;
  std::vector<Bucket> complete;
  for (int64_t k = first; k < last; ++k) {
    complete.push_back({progress_->buckets()[k].begin, progress_->buckets()[k].end});
  }
  launch(complete.begin(), complete.end());
}

void GradientReducer::launch(std::vector<Bucket>::const_iterator first,
                             std::vector<Bucket>::const_iterator last) {
  // One rank: nothing to average, so a complete bucket is reduced here (in
  // reduce-scatter mode, moved into the partition; no communication, so it
  // fails only where a swapped partition's I/O does, which add_share keeps).
  if (size_ == 1 && scatter_) {
    for (auto job = first; job != last; ++job) static_cast<void>(reduce_scatter(*job));
  }
  std::unique_lock lock(mutex_);
  jobs_.insert(jobs_.end(), first, last);
  if (size_ == 1) reduced_ = static_cast<int64_t>(jobs_.size());
  lock.unlock();
  launched_or_stopping_.notify_one();
  // Partitioned gradients: backward goes on only once at most
  // kBucketsInFlight buckets are waiting, so the workspace's resident floats
  // stay bounded where communication is slower than backward (see the class
  // comment).
  if (!scatter_ || size_ == 1) return;
  lock.lock();
  bucket_reduced_.wait(lock, [this] {
    return static_cast<int64_t>(jobs_.size()) - reduced_ <= kBucketsInFlight;
  });
}

void GradientReducer::ready_part(int64_t begin, int64_t end) {
  if (!setup_error_.ok() || begin == end) return;
  if (!scatter_ || begin < 0 || end > n_ || begin > end) {
    if (usage_error_.ok()) {
      usage_error_ = core::invalid_argument(
          std::string(kWhat) + ": ready_part " + range_text(begin, end) +
          (scatter_ ? " is not a range inside " + range_text(0, n_)
                    : " in all-reduce mode, which reduces whole buckets only"));
    }
    return;
  }
  std::vector<Bucket> pieces;
  for (int64_t from = begin; from < end; from += bucket_elements_) {
    pieces.push_back({from, std::min(end, from + bucket_elements_), /*part=*/true});
  }
  launch(pieces.begin(), pieces.end());
  std::lock_guard lock(mutex_);
  parts_end_ = static_cast<int64_t>(jobs_.size());
}

void GradientReducer::wait_parts() {
  std::unique_lock lock(mutex_);
  bucket_reduced_.wait(lock, [this] { return reduced_ >= parts_end_; });
}

core::Status GradientReducer::finish() {
  if (!setup_error_.ok()) return setup_error_;
  core::Status error = std::move(usage_error_);
  usage_error_ = {};
  std::unique_lock lock(mutex_);
  if (error.ok()) error = progress_->all_taken(kWhat);
  bucket_reduced_.wait(lock, [this] { return reduced_ == static_cast<int64_t>(jobs_.size()); });
  if (error.ok()) error = communication_error_;
  if (error.ok()) error = add_error_;
  add_error_ = {};
  jobs_.clear();
  parts_end_ = 0;
  reduced_ = 0;
  lock.unlock();
  progress_->reset();
  return error;
}

int64_t GradientReducer::buffer_bytes() const {
  int64_t bytes = static_cast<int64_t>(bucket_count() * (sizeof(GradientBucket) + sizeof(int64_t)));
  {
    std::lock_guard lock(mutex_);
    bytes += static_cast<int64_t>(jobs_.capacity() * sizeof(Bucket));
  }
  bytes += static_cast<int64_t>(
      (shares_.blocks.counts.capacity() + shares_.blocks.displacements.capacity()) *
          sizeof(int64_t) +
      shares_.received.capacity() * sizeof(float));
  // 16-bit and quantized communication's buffers.
  bytes += static_cast<int64_t>((narrow_.sent.capacity() + narrow_.received.capacity() +
                                 narrow_.mean.capacity() + narrow_.gathered.capacity()) *
                                    sizeof(uint16_t) +
                                quantized_buffers_.sent.capacity() +
                                quantized_buffers_.received.capacity() +
                                quantized_buffers_.values.capacity() * sizeof(float));
  return bytes;
}

int64_t GradientReducer::reduced_buckets() const {
  std::lock_guard lock(mutex_);
  return reduced_;
}

void GradientReducer::communication_loop() {
  flush_denormals_on_this_thread();
  std::unique_lock lock(mutex_);
  for (;;) {
    const auto queued = [this] { return reduced_ < static_cast<int64_t>(jobs_.size()); };
    launched_or_stopping_.wait(lock, [&] { return stopping_ || queued(); });
    // Launched buckets are reduced even when stopping: which buckets are
    // launched follows from the ready() calls alone, the same on every rank,
    // while when each rank's thread sees the stop does not. Dropping them
    // would leave peers in a collective this rank never starts.
    if (!queued()) return;
    const Bucket bucket = jobs_[reduced_];  // a copy: jobs_ may grow meanwhile
    // After a failure the communicator is not trusted again; the bucket is
    // only counted, so finish() returns the error instead of waiting forever.
    const bool healthy = communication_error_.ok();
    lock.unlock();
    core::Status error = healthy ? reduce(bucket) : core::Status();
    lock.lock();
    if (!error.ok()) communication_error_ = std::move(error);
    ++reduced_;
    bucket_reduced_.notify_all();
  }
}

core::Status GradientReducer::reduce(const Bucket& bucket) {
  return scatter_ ? reduce_scatter(bucket) : all_reduce(bucket);
}

void GradientReducer::cut(const Bucket& bucket) {
  shares_.blocks = bucket_shares(shares_.partition, bucket.begin, bucket.end);
}

std::unique_ptr<comm::Work> GradientReducer::start_sum(const Bucket& bucket) {
  cut(bucket);
  return comm_->reduce_scatter(
      comm::buffer_of(grads_ + bucket.begin, bucket.end - bucket.begin),
      comm::buffer_of(shares_.received.data(), static_cast<int64_t>(shares_.received.size())),
      shares_.blocks.counts, comm::ReduceOp::kSum);
}

std::vector<std::unique_ptr<comm::Work>> GradientReducer::start_narrow_sum(const Bucket& bucket) {
  cut(bucket);
  const int64_t count = bucket.end - bucket.begin;
  const int64_t own_count = shares_.blocks.counts[shares_.rank];
  const int64_t largest_share = static_cast<int64_t>(shares_.received.size());
  resize_within(narrow_.sent, std::max<int64_t>(1, count), bucket_elements_);
  resize_within(narrow_.received, std::max<int64_t>(1, size_ * own_count), size_ * largest_share);
  const float* from = grads_ + bucket.begin;
  for (int64_t i = 0; i < count; ++i) narrow_.sent[i] = narrowed(from[i], wire_type_);
  // Rank r gets its share of the bucket from every rank, in rank order.
  narrow_.received_blocks = comm::Blocks::consecutive(std::vector<int64_t>(size_, own_count));
  std::vector<std::unique_ptr<comm::Work>> works;
  works.push_back(comm_->all_to_all({narrow_.sent.data(), count, wire_type_}, shares_.blocks,
                                    {narrow_.received.data(), size_ * own_count, wire_type_},
                                    narrow_.received_blocks));
  works.push_back(comm_->then([this, own_count] {
    float* sum = shares_.received.data();
    for (int64_t i = 0; i < own_count; ++i) sum[i] = widened(narrow_.received[i], wire_type_);
    for (int w = 1; w < size_; ++w) {
      const uint16_t* from = narrow_.received.data() + w * own_count;
      for (int64_t i = 0; i < own_count; ++i) sum[i] += widened(from[i], wire_type_);
    }
  }));
  return works;
}

std::vector<std::unique_ptr<comm::Work>> GradientReducer::start_quantized_sum(
    const Bucket& bucket) {
  cut(bucket);
  Quantized& q = quantized_buffers_;
  const int64_t own_count = shares_.blocks.counts[shares_.rank];
  const int64_t own_bytes = quantized_bytes(own_count);
  std::vector<int64_t> sent_counts;
  for (int r = 0; r < size_; ++r) sent_counts.push_back(quantized_bytes(shares_.blocks.counts[r]));
  q.sent_blocks = comm::Blocks::consecutive(sent_counts);
  q.received_blocks = comm::Blocks::consecutive(std::vector<int64_t>(size_, own_bytes));
  const int64_t sent_total = q.sent_blocks.displacements.back() + sent_counts.back();
  // Each rank's share may end in a block of its own: one scale more each.
  const int64_t largest_share = static_cast<int64_t>(shares_.received.size());
  resize_within(q.sent, std::max<int64_t>(1, sent_total),
                quantized_bytes(bucket_elements_) + size_ * static_cast<int64_t>(sizeof(float)));
  resize_within(q.received, std::max<int64_t>(1, size_ * own_bytes),
                size_ * quantized_bytes(largest_share));
  resize_within(q.values, std::max<int64_t>(1, own_count), largest_share);
  for (int r = 0; r < size_; ++r) {
    quantize(grads_ + bucket.begin + shares_.blocks.displacements[r], shares_.blocks.counts[r],
             q.sent.data() + q.sent_blocks.displacements[r]);
  }
  std::vector<std::unique_ptr<comm::Work>> works;
  works.push_back(comm_->all_to_all(comm::buffer_of(q.sent.data(), sent_total), q.sent_blocks,
                                    comm::buffer_of(q.received.data(), size_ * own_bytes),
                                    q.received_blocks));
  works.push_back(comm_->then([this, own_count, own_bytes] {
    Quantized& q = quantized_buffers_;
    float* sum = shares_.received.data();
    dequantize(q.received.data(), own_count, sum);
    for (int w = 1; w < size_; ++w) {
      dequantize(q.received.data() + w * own_bytes, own_count, q.values.data());
      for (int64_t i = 0; i < own_count; ++i) sum[i] += q.values[i];
    }
  }));
  return works;
}

core::Status GradientReducer::narrow_all_reduce(const Bucket& bucket) {
  std::vector<std::unique_ptr<comm::Work>> works = start_narrow_sum(bucket);
  const int64_t own_count = shares_.blocks.counts[shares_.rank];
  const int64_t count = bucket.end - bucket.begin;
  resize_within(narrow_.mean, std::max<int64_t>(1, own_count),
                static_cast<int64_t>(shares_.received.size()));
  resize_within(narrow_.gathered, count, bucket_elements_);
  works.push_back(comm_->then([this, own_count] {
    const float size = static_cast<float>(size_);
    for (int64_t i = 0; i < own_count; ++i) {
      narrow_.mean[i] = narrowed(shares_.received[i] / size, wire_type_);
    }
  }));
  works.push_back(comm_->all_gather({narrow_.mean.data(), own_count, wire_type_},
                                    {narrow_.gathered.data(), count, wire_type_}, shares_.blocks));
  const std::string context =
      std::string(kWhat) + ": bucket " + range_text(bucket.begin, bucket.end);
  if (core::Status status = wait_in_order(works, context); !status.ok()) return status;
  for (int64_t i = 0; i < count; ++i)
    grads_[bucket.begin + i] = widened(narrow_.gathered[i], wire_type_);
  return {};
}

core::Status GradientReducer::all_reduce(const Bucket& bucket) {
  if (wire_type_ != core::DType::kF32) return narrow_all_reduce(bucket);
  // Queued back to back on the communicator's stream: the sum's share, its
  // mean (on the stream's thread), the means gathered into the bucket.
  auto sum = start_sum(bucket);
  const int64_t own_count = shares_.blocks.counts[shares_.rank];
  auto mean = comm_->then([this, own_count] {
    // Division, not multiplication by 1/size: the correctly rounded mean of the sum.
    const float size = static_cast<float>(size_);
    for (int64_t i = 0; i < own_count; ++i) shares_.received[i] /= size;
  });
  auto gather = comm_->all_gather(comm::buffer_of(shares_.received.data(), own_count),
                                  comm::buffer_of(grads_ + bucket.begin, bucket.end - bucket.begin),
                                  shares_.blocks);
  // Waited in order, so a hang names the collective that never completed;
  // the stream goes on to the next without waiting for this thread.
  const std::string context = std::string(kWhat) + ": bucket " + range_text(bucket.begin, bucket.end);
  core::Status status = sum->wait().with_context(context);
  if (status.ok()) status = mean->wait().with_context(context);
  if (status.ok()) status = gather->wait().with_context(context);
  return status;
}

void GradientReducer::add_share(const Bucket& bucket, const float* summed) {
  const ZeroPartition& partition = shares_.partition;
  const int rank = shares_.rank;
  const int64_t own_begin = std::max(bucket.begin, partition.begin(rank));
  const int64_t own_count = std::min(bucket.end, partition.end(rank)) - own_begin;  // may be <= 0
  core::Status added;
  if (own_count > 0) {
    // Division, not multiplication by 1/size: the correctly rounded mean of
    // the sum; in 16-bit communication rounded to the wire's type, as the
    // all-reduce mode rounds its mean (one rank sends nothing: no rounding).
    const float size = static_cast<float>(size_);
    const bool narrow = !(wire_type_ == core::DType::kF32 || quantized_ || size_ == 1);
    added = scatter_->add(own_begin, own_begin + own_count,
                          [&](float* own, int64_t first, int64_t count) {
                            const float* share = summed + first;
                            if (!narrow) {
                              for (int64_t i = 0; i < count; ++i) own[i] += share[i] / size;
                            } else {
                              for (int64_t i = 0; i < count; ++i) {
                                own[i] += widened(narrowed(share[i] / size, wire_type_),
                                                  wire_type_);
                              }
                            }
                          });
  }
  // Buckets are reduced in index order, so the floats from this bucket's end
  // to the end of its last page belong to the bucket before, already zeroed
  // (or lie past n_, never written): zeroing through that page end lets the
  // page go back to the OS too. A part's neighbours may still be written.
  ReleasableBuffer& workspace = *scatter_->workspace;
  workspace.zero(bucket.begin, bucket.part ? bucket.end : workspace.page_end(bucket.end));
  if (!added.ok()) {
    std::lock_guard lock(mutex_);
    if (add_error_.ok()) {
      add_error_ = added.with_context(std::string(kWhat) + ": adding bucket " +
                                      range_text(bucket.begin, bucket.end) + " to the partition");
    }
  }
}

core::Status GradientReducer::reduce_scatter(const Bucket& bucket) {
  if (size_ == 1) {  // the bucket is its own sum
    const int64_t own_begin = std::max(bucket.begin, shares_.partition.begin(0));
    add_share(bucket, grads_ + own_begin);
    return {};
  }
  // The share's mean is added on the stream's thread, right after the sum.
  std::vector<std::unique_ptr<comm::Work>> works;
  if (quantized_) {
    works = start_quantized_sum(bucket);
  } else if (wire_type_ != core::DType::kF32) {
    works = start_narrow_sum(bucket);
  } else {
    works.push_back(start_sum(bucket));
  }
  // The bucket by value: after a failed wait the stream still runs this,
  // when the caller's copy is gone.
  works.push_back(comm_->then([this, bucket] { add_share(bucket, shares_.received.data()); }));
  return wait_in_order(works,
                       std::string(kWhat) + ": bucket " + range_text(bucket.begin, bucket.end));
}

}  // namespace dslaunch::worker
