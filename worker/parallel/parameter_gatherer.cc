#include "worker/parallel/parameter_gatherer.h"

#include <algorithm>
#include <chrono>
#include <climits>

#include "worker/parallel/mpi_error.h"

namespace dslaunch::worker {
namespace {

// The ranges, each cut into pieces MPI can count (ints).
std::vector<ParameterGatherer::Range> countable(const std::vector<ParameterGatherer::Range>& in) {
  std::vector<ParameterGatherer::Range> out;
  for (const auto& [begin, end] : in) {
    for (int64_t at = begin; at < end; at += INT_MAX) {
      out.emplace_back(at, std::min<int64_t>(end, at + INT_MAX));
    }
  }
  return out;
}

// Waits for a request by testing it every kPollInterval, asleep in between.
// A blocking collective would spin in Open MPI's progress loop on a core the
// compute thread needs (the gathers are meant to overlap the compute); this
// thread only needs to wake often enough to move the next fragment.
constexpr std::chrono::microseconds kPollInterval{100};

int wait_sleeping(MPI_Request& request) {
  for (;;) {
    int done = 0;
    if (const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) return rc;
    if (done) return MPI_SUCCESS;
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace

ParameterGatherer::ParameterGatherer(MPI_Comm comm, const ZeroPartition& partition,
                                     const float* master, ReleasableBuffer& workspace,
                                     std::vector<std::vector<Range>> regions)
    : partition_(partition),
      master_(master),
      workspace_(workspace),
      counts_(partition.ranks),
      displacements_(partition.ranks),
      states_(regions.size(), State::kReleased) {
  for (const std::vector<Range>& region : regions) {
    regions_.push_back(countable(region));
    int64_t size = 0;
    for (const auto& [begin, end] : region) size += end - begin;
    sizes_.push_back(size);
  }
  int size = 0;
  MPI_Comm_size(comm, &size);
  if (size != partition.ranks || workspace.size() != partition.total) {
    error_ = "parameter gatherer: the partition does not match the communicator or workspace";
    return;
  }
  if (const int rc = MPI_Comm_dup(comm, &comm_); rc != MPI_SUCCESS) {
    error_ = mpi_error_message("MPI_Comm_dup", rc);
    comm_ = MPI_COMM_NULL;
    return;
  }
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  thread_ = std::thread([this] { communication_loop(); });
}

ParameterGatherer::~ParameterGatherer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  requested_or_stopping_.notify_all();
  if (thread_.joinable()) thread_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

void ParameterGatherer::prefetch(int region) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (states_[region] != State::kReleased) return;
    states_[region] = State::kRequested;
    live_floats_ += sizes_[region];
    queue_.push_back(region);
  }
  requested_or_stopping_.notify_one();
}

void ParameterGatherer::acquire(int region) {
  prefetch(region);
  std::unique_lock<std::mutex> lock(mutex_);
  gathered_.wait(lock, [&] { return states_[region] == State::kResident || !error_.empty(); });
}

void ParameterGatherer::release(int region) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (states_[region] != State::kResident) return;
    states_[region] = State::kReleased;
    live_floats_ -= sizes_[region];
  }
  for (const auto& [begin, end] : regions_[region]) workspace_.zero(begin, end);
}

bool ParameterGatherer::live(int region) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return states_[region] != State::kReleased;
}

int64_t ParameterGatherer::live_floats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_floats_;
}

std::string ParameterGatherer::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void ParameterGatherer::communication_loop() {
  for (;;) {
    int region = 0;
    bool failed = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      requested_or_stopping_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      region = queue_.front();
      failed = !error_.empty();
    }
    // After a failure peers may be gone: no more collectives.
    const std::string error = failed ? "" : gather(region);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.pop_front();
      states_[region] = State::kResident;
      if (error_.empty()) error_ = error;
    }
    gathered_.notify_all();
  }
}

std::string ParameterGatherer::gather(int region) {
  const int64_t own_begin = partition_.begin(rank_);
  const int64_t own_end = partition_.end(rank_);
  for (const auto& [begin, end] : regions_[region]) {
    for (int r = 0; r < partition_.ranks; ++r) {
      const int64_t from = std::max(begin, partition_.begin(r));
      const int64_t to = std::min(end, partition_.end(r));
      counts_[r] = static_cast<int>(std::max<int64_t>(0, to - from));
      displacements_[r] = counts_[r] > 0 ? static_cast<int>(from - begin) : 0;
    }
    const float* send = master_ + std::clamp(begin, own_begin, own_end);
    MPI_Request request = MPI_REQUEST_NULL;
    if (const int rc =
            MPI_Iallgatherv(send, counts_[rank_], MPI_FLOAT, workspace_.data() + begin,
                            counts_.data(), displacements_.data(), MPI_FLOAT, comm_, &request);
        rc != MPI_SUCCESS) {
      return "parameter all-gather: " + mpi_error_message("MPI_Iallgatherv", rc);
    }
    if (const int rc = wait_sleeping(request); rc != MPI_SUCCESS) {
      return "parameter all-gather: " + mpi_error_message("MPI_Iallgatherv", rc);
    }
  }
  return "";
}

}  // namespace dslaunch::worker
