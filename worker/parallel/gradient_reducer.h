#pragma once

#include <mpi.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dslaunch::worker {

// Data-parallel gradient averaging, overlapped with the backward pass.
//
// The flat gradient buffer is cut once into contiguous buckets of
// `bucket_elements` floats, aligned to the END of the buffer: bucket 0 is the
// last `bucket_elements` floats, bucket 1 the ones before them, and the first
// bucket of the buffer takes the remainder. The backward pass finishes
// gradients from the end of the buffer towards its start, so the buckets
// complete in index order. A bucket is launched once all its floats have been
// reported by ready() AND every bucket before it in index order has been
// launched: MPI needs the same sequence of collectives on every rank, and
// launching in index order makes it so whatever order each rank reports its
// ranges in. Ranges reported front-first are still correct, only reduced
// later (no overlap).
//
// A communication thread, the only one calling MPI for this object, runs
// MPI_Allreduce(MPI_IN_PLACE, MPI_SUM) on each launched bucket in turn and
// divides it by the communicator's size, so after finish() the buffer holds
// the mean over ranks. Nothing is copied: the reduction works in `grads`.
//
// bucket_elements counts floats, as DeepSpeed's zero_optimization.
// reduce_bucket_size counts elements (its default 5e8 is 500M elements, 2 GB
// of fp32); it is capped at INT_MAX, MPI's largest count, and at n.
//
// On a communicator of one rank there is no thread and no MPI call: ready()
// only checks its ranges and finish() leaves the values as they are.
//
// Threads: ready() and finish() from one thread (the compute thread), never
// concurrently; reduced_buckets() and the other accessors from any thread.
// Between the ready() that covers a float and the next finish() return, the
// caller must neither read nor write that float: the communication thread
// owns it.
class GradientReducer {
 public:
  // grads: the flat gradient buffer of n floats, owned by the caller, alive
  // and not moved for this object's lifetime. comm: the data-parallel
  // communicator; it is duplicated (with MPI_ERRORS_RETURN) so this traffic
  // never meets other traffic on it. Collective over comm when it has more
  // than one rank (MPI_Comm_dup). Needs MPI initialised with
  // MPI_THREAD_MULTIPLE (other threads call MPI while this one reduces).
  // A failure here (bad arguments, thread level, MPI_Comm_dup) makes every
  // finish() return it; ready() then does nothing.
  GradientReducer(MPI_Comm comm, float* grads, int64_t n, int64_t bucket_elements);

  // Makes no collective call and does not wait for other ranks' progress:
  // launched buckets not yet started are dropped, a reduction already running
  // completes (its peers run the same collective), the thread is joined and
  // the duplicate communicator freed (Open MPI frees it locally; left alone
  // after MPI_Finalize).
  ~GradientReducer();

  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Floats [begin, end) hold their final gradient for this step. Each float
  // must be reported exactly once per step; ranges may come in any order and
  // size. Launches every bucket this completes (see above) and returns without
  // waiting for communication. A range outside [0, n), reversed, or covering
  // a float already reported is ignored and makes finish() fail.
  void ready(int64_t begin, int64_t end);

  // Waits until every launched bucket is reduced; then the buffer holds the
  // mean over ranks and the object is ready for the next step. Returns "" on
  // success, else what went wrong: the construction error, a misuse of
  // ready(), floats never reported (first bucket named), or the first MPI
  // error, which sticks (no MPI call is made on this communicator again).
  // Precondition for success on every rank: every rank reported every float;
  // a rank that did not leaves its peers blocked in a collective it never
  // starts, which the caller must end (MPI_Abort).
  std::string finish();

  // Heap bytes held: the bucket table. No communication buffer is held
  // because the reduction is in place (MPI may use scratch space of its own
  // while a bucket is reduced).
  int64_t buffer_bytes() const;

  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }
  // Buckets reduced since the last finish(); thread-safe.
  int64_t reduced_buckets() const;

 private:
  struct Bucket {
    int64_t begin = 0;
    int64_t end = 0;
    int64_t unreported = 0;  // floats not yet passed to ready() this step
  };

  std::string check_range(int64_t begin, int64_t end) const;
  void launch_complete_buckets();
  void communication_loop();
  std::string reduce(const Bucket& bucket);  // communication thread only

  float* const grads_;
  const int64_t n_;
  int64_t bucket_elements_ = 1;
  std::vector<Bucket> buckets_;    // in launch order; buckets_[0] ends at n_
  MPI_Comm comm_ = MPI_COMM_NULL;  // our duplicate; MPI_COMM_NULL on one rank
  int size_ = 1;
  std::string setup_error_;
  std::string usage_error_;  // compute thread only

  // Launched buckets are a prefix of buckets_, so the queue to the
  // communication thread is the range [reduced_, launched_).
  mutable std::mutex mutex_;
  std::condition_variable launched_or_stopping_;
  std::condition_variable bucket_reduced_;
  int64_t launched_ = 0;  // written by the compute thread only, under mutex_
  int64_t reduced_ = 0;
  std::string communication_error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dslaunch::worker
