#include "worker/parallel/parameter_gatherer.h"

#include <algorithm>
#include <climits>

#include "worker/parallel/block_quantizer.h"

namespace dslaunch::worker {
namespace {

// The ranges, each cut into pieces a collective can count (MPI counts in
// ints), quantized or not.
std::vector<ParameterGatherer::Range> countable(const std::vector<ParameterGatherer::Range>& in) {
  std::vector<ParameterGatherer::Range> out;
  for (const auto& [begin, end] : in) {
    for (int64_t at = begin; at < end; at += kMaxQuantizableCount) {
      out.emplace_back(at, std::min<int64_t>(end, at + kMaxQuantizableCount));
    }
  }
  return out;
}

}  // namespace

ParameterGatherer::ParameterGatherer(comm::Communicator& comm, const ZeroPartition& partition,
                                     const float* master, ReleasableBuffer& workspace,
                                     std::vector<std::vector<Range>> regions, int secondary_group)
    : partition_(partition),
      master_(master),
      workspace_(workspace),
      states_(regions.size(), State::kReleased) {
  secondary_fresh_.assign(regions.size(), false);
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
  if (secondary_group > 1) {
    if (comm_->size() % secondary_group != 0) {
      error_ = "ZeRO++: zero_hpz_partition_size " + std::to_string(secondary_group) +
               " does not divide the data-parallel size " + std::to_string(comm_->size());
      return;
    }
    auto group = comm_->split("hpz", rank_ / secondary_group);
    if (!group.ok()) {
      error_ = "parameter gatherer: " + group.status().message();
      return;
    }
    group_ = std::move(group.value());
    member_ = group_->rank();
    int64_t offset = 0;
    for (const std::vector<Range>& region : regions_) {
      secondary_offsets_.emplace_back();
      for (const auto& [begin, end] : region) {
        secondary_offsets_.back().push_back(offset);
        const Range piece = secondary_piece(begin, end, member_);
        offset += piece.second - piece.first;
      }
    }
    secondary_.assign(offset, 0.0f);
    group_blocks_.counts.assign(secondary_group, 0);
    group_blocks_.displacements.assign(secondary_group, 0);
  }
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
    // Decided here, in call order, so every rank decides alike; a primary
    // gather queued now fills the pieces before any later request reads them.
    const bool secondary = group_ != nullptr && secondary_fresh_[region];
    if (group_ != nullptr) secondary_fresh_[region] = true;
    queue_.push_back({region, secondary});
  }
  requested_or_stopping_.notify_one();
}

void ParameterGatherer::invalidate_secondary() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::fill(secondary_fresh_.begin(), secondary_fresh_.end(), false);
}

ParameterGatherer::Range ParameterGatherer::secondary_piece(int64_t begin, int64_t end,
                                                            int member) const {
  const int64_t length = end - begin;
  const int group = group_->size();
  return {begin + length * member / group, begin + length * (member + 1) / group};
}

void ParameterGatherer::keep_secondary(int region) {
  const std::vector<Range>& ranges = regions_[region];
  for (size_t k = 0; k < ranges.size(); ++k) {
    const auto [from, to] = secondary_piece(ranges[k].first, ranges[k].second, member_);
    std::copy(workspace_.data() + from, workspace_.data() + to,
              secondary_.data() + secondary_offsets_[region][k]);
  }
}

std::string ParameterGatherer::gather_secondary(int region) {
  const std::vector<Range>& ranges = regions_[region];
  for (size_t k = 0; k < ranges.size(); ++k) {
    const auto [begin, end] = ranges[k];
    for (int m = 0; m < group_->size(); ++m) {
      const auto [from, to] = secondary_piece(begin, end, m);
      group_blocks_.counts[m] = to - from;
      group_blocks_.displacements[m] = from - begin;
    }
    auto work =
        group_->all_gather(comm::buffer_of(secondary_.data() + secondary_offsets_[region][k],
                                           group_blocks_.counts[member_]),
                           comm::buffer_of(workspace_.data() + begin, end - begin), group_blocks_);
    if (core::Status status = work->wait(); !status.ok()) {
      return "parameter all-gather within the hpZ group: " + status.message();
    }
  }
  return "";
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
    bool secondary = false;
    bool failed = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      requested_or_stopping_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      // Requested regions are gathered even when stopping: the requests
      // follow the calls, the same on every rank; when each rank's thread
      // sees the stop does not (see GradientReducer).
      if (queue_.empty()) return;
      region = queue_.front().region;
      secondary = queue_.front().secondary;
      failed = !error_.empty();
    }
    // After a failure peers may be gone: no more collectives.
    const std::string error = failed ? "" : gather(region, secondary);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.pop_front();
      states_[region] = State::kResident;
      if (error_.empty()) error_ = error;
    }
    gathered_.notify_all();
  }
}

std::string ParameterGatherer::gather(int region, bool secondary) {
  if (secondary) return gather_secondary(region);
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
    const std::string error =
        quantized_ ? gather_quantized(begin, send) : gather_range(begin, end, send);
    if (!error.empty()) return error;
  }
  if (group_ != nullptr) keep_secondary(region);
  return "";
}

std::string ParameterGatherer::gather_range(int64_t begin, int64_t end, const float* send) {
  auto work = comm_->all_gather(comm::buffer_of(send, blocks_.counts[rank_]),
                                comm::buffer_of(workspace_.data() + begin, end - begin), blocks_);
  if (core::Status status = work->wait(); !status.ok()) {
    return "parameter all-gather: " + status.message();
  }
  return "";
}

std::string ParameterGatherer::gather_quantized(int64_t begin, const float* send) {
  std::vector<int64_t> counts;
  for (const int64_t count : blocks_.counts) counts.push_back(quantized_bytes(count));
  const comm::Blocks bytes = comm::Blocks::consecutive(counts);
  const int64_t total = bytes.displacements.back() + counts.back();
  quantized_sent_.resize(std::max<int64_t>(1, counts[rank_]));
  quantized_received_.resize(std::max<int64_t>(1, total));
  quantize(send, blocks_.counts[rank_], quantized_sent_.data());
  auto work = comm_->all_gather(comm::buffer_of(quantized_sent_.data(), counts[rank_]),
                                comm::buffer_of(quantized_received_.data(), total), bytes);
  if (core::Status status = work->wait(); !status.ok()) {
    return "quantized parameter all-gather: " + status.message();
  }
  for (size_t r = 0; r < counts.size(); ++r) {
    if (blocks_.counts[r] == 0) continue;
    dequantize(quantized_received_.data() + bytes.displacements[r], blocks_.counts[r],
               workspace_.data() + begin + blocks_.displacements[r]);
  }
  return "";
}

}  // namespace dslaunch::worker
