#include "worker/parallel/gradient_reducer.h"

#include <algorithm>
#include <climits>
#include <string>

#if defined(__SSE2__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

#include "worker/parallel/mpi_error.h"

namespace dslaunch::worker {
namespace {

constexpr const char* kWhat = "gradient reducer";

// The communication thread adds gradients (inside MPI_SUM) and divides them;
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

}  // namespace

GradientReducer::GradientReducer(MPI_Comm comm, float* grads, int64_t n, int64_t bucket_elements)
    : grads_(grads), n_(n) {
  start(comm, bucket_elements);
}

GradientReducer::GradientReducer(MPI_Comm comm, ReleasableBuffer& workspace,
                                 int64_t bucket_elements, const ZeroPartition& partition,
                                 float* partition_grads)
    : grads_(workspace.data()), n_(workspace.size()) {
  scatter_.emplace();
  scatter_->workspace = &workspace;
  scatter_->partition_grads = partition_grads;
  shares_.partition = partition;
  start(comm, bucket_elements);
}

void GradientReducer::start(MPI_Comm comm, int64_t bucket_elements) {
  const int64_t n = n_;
  if (n < 0 || bucket_elements < 1 || (n > 0 && grads_ == nullptr)) {
    setup_error_ = std::string(kWhat) +
                   ": needs a buffer of n >= 0 floats and a bucket size >= 1 (got n " +
                   std::to_string(n) + ", bucket size " + std::to_string(bucket_elements) + ")";
    return;
  }
  bucket_elements_ = std::min<int64_t>({bucket_elements, INT_MAX, std::max<int64_t>(n, 1)});
  for (int64_t end = n; end > 0; end -= bucket_elements_) {
    const int64_t begin = std::max<int64_t>(0, end - bucket_elements_);
    buckets_.push_back({begin, end, end - begin});
  }

  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    setup_error_ = std::string(kWhat) + ": MPI is not initialised";
    return;
  }
  if (int code = MPI_Comm_size(comm, &size_); code != MPI_SUCCESS) {
    setup_error_ = std::string(kWhat) + ": " + mpi_error_message("MPI_Comm_size", code);
    return;
  }
  // One rank in all-reduce mode has nothing to cut; in reduce-scatter mode
  // it still moves buckets into its (whole) partition.
  if (size_ == 1 && !scatter_) return;
  if (!scatter_) shares_.partition = make_zero_partition(n_, size_, kZeroPartitionAlignment);
  if (std::string error = setup_shares(comm); !error.empty()) {
    setup_error_ = std::string(kWhat) + ": " + error;
    return;
  }
  if (size_ == 1) return;

  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    setup_error_ = std::string(kWhat) +
                   ": MPI was initialised without MPI_THREAD_MULTIPLE (thread level " +
                   std::to_string(provided) +
                   "); its communication thread calls MPI while other threads do: initialise MPI "
                   "with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)";
    return;
  }
  if (int code = MPI_Comm_dup(comm, &comm_); code != MPI_SUCCESS) {
    comm_ = MPI_COMM_NULL;
    setup_error_ = std::string(kWhat) + ": " + mpi_error_message("MPI_Comm_dup", code);
    return;
  }
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  thread_ = std::thread([this] { communication_loop(); });
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  launched_or_stopping_.notify_one();
  if (thread_.joinable()) thread_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

std::string GradientReducer::setup_shares(MPI_Comm comm) {
  const ZeroPartition& partition = shares_.partition;
  if (int code = MPI_Comm_rank(comm, &shares_.rank); code != MPI_SUCCESS) {
    return mpi_error_message("MPI_Comm_rank", code);
  }
  if (partition.ranks != size_ || partition.total != n_) {
    return "the partition (" + std::to_string(partition.total) + " floats over " +
           std::to_string(partition.ranks) + " ranks) does not cover the workspace (" +
           std::to_string(n_) + " floats) over the communicator's " + std::to_string(size_) +
           " ranks";
  }
  const int rank = shares_.rank;
  if (scatter_) {
    if (scatter_->workspace->data() == nullptr && !scatter_->workspace->error().empty()) {
      return scatter_->workspace->error();
    }
    const int64_t own = partition.end(rank) - partition.begin(rank);
    if (own > 0 && scatter_->partition_grads == nullptr) {
      return "no buffer for this rank's " + std::to_string(own) + " partition gradients";
    }
  }
  shares_.counts.assign(size_, 0);
  shares_.displacements.assign(size_, 0);
  // The largest share of one bucket this rank receives; at least one float
  // so the receive buffer is never null.
  int64_t largest = 1;
  for (const Bucket& bucket : buckets_) {
    largest = std::max(largest, std::min(bucket.end, partition.end(rank)) -
                                    std::max(bucket.begin, partition.begin(rank)));
  }
  shares_.received.assign(largest, 0.0f);
  return "";
}

std::string GradientReducer::check_range(int64_t begin, int64_t end) const {
  if (begin < 0 || end > n_ || begin > end) {
    return std::string(kWhat) + ": ready" + range_text(begin, end) + " is not a range inside " +
           range_text(0, n_);
  }
  const int64_t first = (n_ - end) / bucket_elements_;
  const int64_t last = (n_ - 1 - begin) / bucket_elements_;
  for (int64_t k = first; k <= last; ++k) {
    const Bucket& bucket = buckets_[k];
    const int64_t covered = std::min(end, bucket.end) - std::max(begin, bucket.begin);
    if (covered > bucket.unreported) {
      return std::string(kWhat) + ": ready" + range_text(begin, end) +
             " reports floats already reported this step (bucket " +
             range_text(bucket.begin, bucket.end) + ")";
    }
  }
  return "";
}

void GradientReducer::ready(int64_t begin, int64_t end) {
  if (!setup_error_.empty() || begin == end) return;
  if (std::string error = check_range(begin, end); !error.empty()) {
    if (usage_error_.empty()) usage_error_ = std::move(error);
    return;
  }
  const int64_t first = (n_ - end) / bucket_elements_;
  const int64_t last = (n_ - 1 - begin) / bucket_elements_;
  for (int64_t k = first; k <= last; ++k) {
    Bucket& bucket = buckets_[k];
    bucket.unreported -= std::min(end, bucket.end) - std::max(begin, bucket.begin);
  }
  launch_complete_buckets();
}

void GradientReducer::launch_complete_buckets() {
  int64_t launch_end = launched_;
  while (launch_end < bucket_count() && buckets_[launch_end].unreported == 0) ++launch_end;
  if (launch_end == launched_) return;
  // One rank: nothing to average, so a complete bucket is reduced here (in
  // reduce-scatter mode, moved into the partition).
  if (size_ == 1 && scatter_) {
    for (int64_t k = launched_; k < launch_end; ++k) reduce_scatter(buckets_[k]);
  }
  {
    std::lock_guard lock(mutex_);
    launched_ = launch_end;
    if (size_ == 1) reduced_ = launched_;
  }
  launched_or_stopping_.notify_one();
}

std::string GradientReducer::finish() {
  if (!setup_error_.empty()) return setup_error_;
  std::string error = std::move(usage_error_);
  usage_error_.clear();
  std::unique_lock lock(mutex_);
  if (error.empty() && launched_ < bucket_count()) {
    const Bucket& bucket = buckets_[launched_];
    error = std::string(kWhat) +
            ": finish() before all gradients were reported: " + std::to_string(bucket.unreported) +
            " floats of bucket " + range_text(bucket.begin, bucket.end) +
            " were never passed to ready()";
  }
  bucket_reduced_.wait(lock, [this] { return reduced_ == launched_; });
  if (error.empty()) error = communication_error_;
  launched_ = 0;
  reduced_ = 0;
  lock.unlock();
  for (Bucket& bucket : buckets_) bucket.unreported = bucket.end - bucket.begin;
  return error;
}

int64_t GradientReducer::buffer_bytes() const {
  int64_t bytes = static_cast<int64_t>(buckets_.capacity() * sizeof(Bucket));
  bytes += static_cast<int64_t>(
      (shares_.counts.capacity() + shares_.displacements.capacity()) * sizeof(int) +
      shares_.received.capacity() * sizeof(float));
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
    launched_or_stopping_.wait(lock, [this] { return stopping_ || reduced_ < launched_; });
    if (stopping_) return;
    const Bucket& bucket = buckets_[reduced_];
    // After an MPI error the communicator is not trusted again; the bucket is
    // only counted, so finish() returns the error instead of waiting forever.
    const bool healthy = communication_error_.empty();
    lock.unlock();
    std::string error = healthy ? reduce(bucket) : std::string();
    lock.lock();
    if (!error.empty()) communication_error_ = std::move(error);
    ++reduced_;
    bucket_reduced_.notify_all();
  }
}

std::string GradientReducer::reduce(const Bucket& bucket) {
  return scatter_ ? reduce_scatter(bucket) : all_reduce(bucket);
}

void GradientReducer::cut(const Bucket& bucket) {
  // Partitions are consecutive, so rank r's share of the bucket is the r-th
  // consecutive block of it, as MPI_Reduce_scatter lays them out.
  const ZeroPartition& partition = shares_.partition;
  int64_t displacement = 0;
  for (int r = 0; r < size_; ++r) {
    const int64_t count = std::max<int64_t>(
        0, std::min(bucket.end, partition.end(r)) - std::max(bucket.begin, partition.begin(r)));
    shares_.counts[r] = static_cast<int>(count);
    shares_.displacements[r] = static_cast<int>(displacement);
    displacement += count;
  }
}

std::string GradientReducer::sum_shares(const Bucket& bucket) {
  cut(bucket);
  if (int code = MPI_Reduce_scatter(grads_ + bucket.begin, shares_.received.data(),
                                    shares_.counts.data(), MPI_FLOAT, MPI_SUM, comm_);
      code != MPI_SUCCESS) {
    return std::string(kWhat) + ": bucket " + range_text(bucket.begin, bucket.end) + ": " +
           mpi_error_message("MPI_Reduce_scatter", code);
  }
  return "";
}

std::string GradientReducer::all_reduce(const Bucket& bucket) {
  if (std::string error = sum_shares(bucket); !error.empty()) return error;
  // Division, not multiplication by 1/size: the correctly rounded mean of the sum.
  const float size = static_cast<float>(size_);
  const int own_count = shares_.counts[shares_.rank];
  for (int i = 0; i < own_count; ++i) shares_.received[i] /= size;
  if (int code = MPI_Allgatherv(shares_.received.data(), own_count, MPI_FLOAT,
                                grads_ + bucket.begin, shares_.counts.data(),
                                shares_.displacements.data(), MPI_FLOAT, comm_);
      code != MPI_SUCCESS) {
    return std::string(kWhat) + ": bucket " + range_text(bucket.begin, bucket.end) + ": " +
           mpi_error_message("MPI_Allgatherv", code);
  }
  return "";
}

std::string GradientReducer::reduce_scatter(const Bucket& bucket) {
  const ZeroPartition& partition = shares_.partition;
  const int rank = shares_.rank;
  const int64_t own_begin = std::max(bucket.begin, partition.begin(rank));
  const int64_t own_count = std::min(bucket.end, partition.end(rank)) - own_begin;  // may be <= 0
  const float* summed = grads_ + own_begin;  // one rank: the bucket is its own sum
  if (size_ > 1) {
    if (std::string error = sum_shares(bucket); !error.empty()) return error;
    summed = shares_.received.data();
  }
  if (own_count > 0) {
    float* own = scatter_->partition_grads + (own_begin - partition.begin(rank));
    // Division, not multiplication by 1/size: the correctly rounded mean of the sum.
    const float size = static_cast<float>(size_);
    for (int64_t i = 0; i < own_count; ++i) own[i] += summed[i] / size;
  }
  // Buckets are reduced in index order, so the floats from this bucket's end
  // to the end of its last page belong to the bucket before, already zeroed
  // (or lie past n_, never written): zeroing through that page end lets the
  // page go back to the OS too.
  ReleasableBuffer& workspace = *scatter_->workspace;
  workspace.zero(bucket.begin, workspace.page_end(bucket.end));
  return "";
}

}  // namespace dslaunch::worker
