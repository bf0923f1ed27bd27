#include "worker/engine/zero3_parameters.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/layout/zero3_regions.h"

namespace dslaunch::worker::engine {
namespace {

using Range = ParameterGatherer::Range;

// MPI counts in ints.
constexpr const char* kTooManyPersistent =
    "ZeRO stage 3: more than INT_MAX persistent floats; lower stage3_param_persistence_threshold";

}  // namespace

Zero3Parameters::Zero3Parameters(comm::Communicator& comm, const core::ParameterTable& table,
                                 const ZeroPartition& partition, const Zero3Settings& settings,
                                 const InitialParameters& initial,
                                 std::unique_ptr<PartitionSwap> swap)
    : comm_(comm),
      table_(table),
      partition_(partition),
      layers_(static_cast<int>(table.config().num_layers)),
      master_(partition.padded_total()),
      workspace_(table.total()) {
  rank_ = comm.rank();
  if (!master_.status().ok() || !workspace_.status().ok()) {
    setup_error_ =
        master_.status().ok() ? workspace_.status().message() : master_.status().message();
    return;
  }
  // What is gathered, per region, and what stays whole.
  core::Zero3Regions layout(table, settings.persistence_threshold);
  prefetch_.emplace(layout, settings.prefetch_bucket_size, settings.max_live_parameters);
  persistent_ = std::move(layout.persistent);
  chunks_ = layout.chunks;
  std::vector<std::vector<Range>> regions = std::move(layout.regions);
  for (const auto& [begin, end] : persistent_) {
    if (!initial(begin, end, workspace_.data() + begin).ok()) return;
  }

  packed_blocks_ = packed_range_blocks(persistent_, partition);
  const int64_t packed = packed_blocks_.displacements.back() + packed_blocks_.counts.back();
  if (packed > INT_MAX) {
    setup_error_ = kTooManyPersistent;
    return;
  }
  packed_.resize(packed);
  regions_ = regions;
  gatherer_.emplace(comm, partition, master_.data(), workspace_, std::move(regions),
                    settings.hpz_partition_size);
  gatherer_->set_quantized(settings.quantized_weights);
  // The partition, read a piece at a time; with a swap file each piece goes
  // there and leaves memory at once, so the partition is never resident.
  swap_ = std::move(swap);
  constexpr int64_t kPieceFloats = int64_t{2} << 20;
  for (int64_t begin = partition.begin(rank_); begin < partition.end(rank_);
       begin += kPieceFloats) {
    const int64_t end = std::min(begin + kPieceFloats, partition.end(rank_));
    if (!initial(begin, end, master_.data() + begin).ok()) return;
    if (!swap_) continue;
    if (core::Status status = swap_->store(begin, end, master_.data() + begin); !status.ok()) {
      setup_error_ = "offload_param: " + status.message();
      return;
    }
    master_.zero(begin, end);
  }
  if (swap_) {
    partition_resident_ = false;
    gatherer_->set_own_loader([this](int64_t begin, int64_t end) -> std::string {
      core::Status status = swap_->load(begin, end, master_.data() + begin);
      return status.ok() ? "" : "offload_param: " + status.message();
    });
  }
}

core::Status Zero3Parameters::load_partition(bool read) {
  if (!swap_ || partition_resident_) return {};
  if (!read) {
    partition_resident_ = true;
    return {};
  }
  if (core::Status status = swap_->load(partition_.begin(rank_), partition_.end(rank_),
                                        master_.data() + partition_.begin(rank_));
      !status.ok()) {
    return status.with_context("offload_param");
  }
  partition_resident_ = true;
  return {};
}

core::Status Zero3Parameters::store_partition(bool changed) {
  if (!swap_ || !partition_resident_) return {};
  const int64_t own_begin = partition_.begin(rank_);
  const int64_t own_end = partition_.end(rank_);
  if (changed) {
    if (core::Status status = swap_->store(own_begin, own_end, master_.data() + own_begin);
        !status.ok()) {
      return status.with_context("offload_param");
    }
  }
  master_.zero(own_begin, own_end);
  partition_resident_ = false;
  return {};
}

core::Status Zero3Parameters::load_range(int64_t begin, int64_t end, bool read) {
  if (!swap_ || partition_resident_ || !read) return {};
  return swap_->load(begin, end, master_.data() + begin).with_context("offload_param");
}

core::Status Zero3Parameters::store_range(int64_t begin, int64_t end) {
  if (!swap_ || partition_resident_) return {};
  if (core::Status status = swap_->store(begin, end, master_.data() + begin); !status.ok()) {
    return status.with_context("offload_param");
  }
  master_.zero(begin, end);
  return {};
}

core::Status Zero3Parameters::read_range(int64_t begin, int64_t end, float* out) {
  if (!swap_ || partition_resident_) {
    std::memcpy(out, master_.data() + begin, (end - begin) * sizeof(float));
    return {};
  }
  return swap_->load(begin, end, out).with_context("offload_param");
}

template <typename Fn>
void Zero3Parameters::for_own_persistent(const Fn& fn) const {
  const int64_t own_begin = partition_.begin(rank_);
  const int64_t own_end = partition_.end(rank_);
  for (const auto& [begin, end] : persistent_) {
    const int64_t from = std::max(begin, own_begin);
    const int64_t to = std::min(end, own_end);
    if (from < to) fn(from, to);
  }
}

void Zero3Parameters::release_own(int region) {
  if (!swap_ || partition_resident_) return;
  const int64_t own_begin = partition_.begin(rank_);
  const int64_t own_end = partition_.end(rank_);
  for (const auto& [begin, end] : regions_[region]) {
    const int64_t from = std::max(begin, own_begin);
    const int64_t to = std::min(end, own_end);
    if (from < to) master_.zero(from, to);
  }
}

std::string Zero3Parameters::error() const {
  if (!setup_error_.empty()) return setup_error_;
  return gatherer_ ? gatherer_->error() : "";
}

std::string Zero3Parameters::refresh_persistent() {
  gatherer_->invalidate_secondary();  // the step changed the parameters
  float* mine = packed_.data() + packed_blocks_.displacements[rank_];
  std::string error;
  for_own_persistent([&](int64_t from, int64_t to) {
    if (!partition_resident_ && error.empty()) {
      const core::Status loaded = swap_->load(from, to, mine);
      if (!loaded.ok()) error = "offload_param: " + loaded.message();
    } else {
      std::memcpy(mine, master_.data() + from, (to - from) * sizeof(float));
    }
    mine += to - from;
  });
  if (!error.empty()) return error;
  auto work = comm_.all_gather(
      comm::buffer_of(packed_.data() + packed_blocks_.displacements[rank_],
                      packed_blocks_.counts[rank_]),
      comm::buffer_of(packed_.data(), static_cast<int64_t>(packed_.size())), packed_blocks_);
  if (core::Status status = work->wait(); !status.ok()) return status.message();
  const float* from = packed_.data();
  for (const auto& [begin, end] : persistent_) {
    std::memcpy(workspace_.data() + begin, from, (end - begin) * sizeof(float));
    from += end - begin;
  }
  return "";
}

void Zero3Parameters::end_forward_only() {
  gatherer_->release(layers_);  // the last block's region
  gatherer_->release(0);        // the embeddings
}

std::string Zero3Parameters::gather_whole(std::vector<float>& out) {
  out.assign(partition_.padded_total(), 0.0f);
  const int64_t own_begin = partition_.begin(rank_);
  if (!partition_resident_) {
    if (core::Status status = swap_->load(own_begin, partition_.end(rank_), out.data() + own_begin);
        !status.ok()) {
      return "offload_param: " + status.message();
    }
  } else {
    std::memcpy(out.data() + own_begin, master_.data() + own_begin,
                (partition_.end(rank_) - own_begin) * sizeof(float));
  }
  // One collective for all (a bucket of the whole buffer): this runs once, at the end.
  return all_gather_partitions(comm_, partition_, partition_.padded_total(), out.data()).message();
}

int64_t Zero3Parameters::parameter_bytes() const {
  int64_t persistent = 0;
  for (const auto& [begin, end] : persistent_) persistent += end - begin;
  const int64_t partition = swap_ ? 0 : partition_.end(rank_) - partition_.begin(rank_);
  return (partition + persistent) * static_cast<int64_t>(sizeof(float));
}

int64_t Zero3Parameters::buffer_bytes() const {
  return static_cast<int64_t>(packed_.size() * sizeof(float)) +
         (swap_ ? swap_->staging_bytes() : 0) +
         gatherer_->secondary_floats() * static_cast<int64_t>(sizeof(float));
}

void Zero3Parameters::acquire_embeddings() {
  gatherer_->acquire(0);
  release_own(0);
  prefetch_->after_embeddings(*gatherer_);
}

void Zero3Parameters::acquire_vocab_chunk(int chunk, VocabUse use) {
  if (chunks_ == 0) return;
  gatherer_->acquire(chunk_region(chunk));
  release_own(chunk_region(chunk));
  prefetch_->after_vocab_chunk(*gatherer_, chunk, use);
}

void Zero3Parameters::release_vocab_chunk(int chunk, VocabUse) {
  if (chunks_ > 0) gatherer_->release(chunk_region(chunk));
}

void Zero3Parameters::release_embeddings() { gatherer_->release(0); }

void Zero3Parameters::acquire_block(int layer, Pass pass) {
  gatherer_->acquire(1 + layer);
  release_own(1 + layer);
  prefetch_->after_block(*gatherer_, layer, pass == Pass::kForward);
}

void Zero3Parameters::release_block(int layer, Pass pass) {
  if (pass == Pass::kForward && layer == layers_ - 1) return;
  gatherer_->release(1 + layer);
}

}  // namespace dslaunch::worker::engine
