#include "worker/parallel/parameter_gatherer.h"

#include <algorithm>
#include <climits>

namespace dslaunch::worker {
namespace {

// The ranges, each cut into pieces a collective can count (MPI counts in ints).
std::vector<ParameterGatherer::Range> countable(const std::vector<ParameterGatherer::Range>& in) {
  std::vector<ParameterGatherer::Range> out;
  for (const auto& [begin, end] : in) {
    for (int64_t at = begin; at < end; at += INT_MAX) {
      out.emplace_back(at, std::min<int64_t>(end, at + INT_MAX));
    }
  }
  return out;
}

}  // namespace

ParameterGatherer::ParameterGatherer(comm::Communicator& comm, const ZeroPartition& partition,
                                     const float* master, ReleasableBuffer& workspace,
                                     std::vector<std::vector<Range>> regions)
    : partition_(partition),
      master_(master),
      workspace_(workspace),
      states_(regions.size(), State::kReleased) {
  for (const std::vector<Range>& region : regions) {
    regions_.push_back(countable(region));
    int64_t size = 0;
    for (const auto& [begin, end] : region) size += end - begin;
    sizes_.push_back(size);
  }
  blocks_.counts.assign(partition.ranks, 0);
  blocks_.displacements.assign(partition.ranks, 0);
  if (comm.size() != partition.ranks || workspace.size() != partition.total) {
    error_ = "parameter gatherer: the partition does not match the communicator or workspace";
    return;
  }
  auto duplicate = comm.duplicate("parameters");
  if (!duplicate.ok()) {
    error_ = "parameter gatherer: " + duplicate.status().message();
    return;
  }
  comm_ = std::move(duplicate.value());
  rank_ = comm_->rank();
  thread_ = std::thread([this] { communication_loop(); });
}

ParameterGatherer::~ParameterGatherer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  requested_or_stopping_.notify_all();
  if (thread_.joinable()) thread_.join();
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
      // Requested regions are gathered even when stopping: the requests
      // follow the calls, the same on every rank; when each rank's thread
      // sees the stop does not (see GradientReducer).
      if (queue_.empty()) return;
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
      blocks_.counts[r] = std::max<int64_t>(0, to - from);
      blocks_.displacements[r] = blocks_.counts[r] > 0 ? from - begin : 0;
    }
    const int64_t send_begin = std::clamp(begin, own_begin, own_end);
    if (own_loader_ && blocks_.counts[rank_] > 0) {
      if (std::string error = own_loader_(send_begin, send_begin + blocks_.counts[rank_]);
          !error.empty()) {
        return error;
      }
    }
    const float* send = master_ + send_begin;
    auto work = comm_->all_gather(comm::buffer_of(send, blocks_.counts[rank_]),
                                  comm::buffer_of(workspace_.data() + begin, end - begin), blocks_);
    if (core::Status status = work->wait(); !status.ok()) {
      return "parameter all-gather: " + status.message();
    }
  }
  return "";
}

}  // namespace dslaunch::worker
