#include "worker/engine/device_zero3_parameters.h"

#include <algorithm>
#include <climits>
#include <stdexcept>

#include <fmt/format.h>

#include "core/layout/zero3_regions.h"
#include "kernels/device_buffer.h"

namespace dslaunch::worker::engine {
namespace {

constexpr int64_t kFloat = sizeof(float);

}  // namespace

DeviceZero3Parameters::DeviceZero3Parameters(comm::Communicator* comm, kernels::Backend& device,
                                             const core::ParameterTable& table,
                                             const ZeroPartition& partition,
                                             int64_t persistence_threshold,
                                             int64_t prefetch_bucket_size,
                                             int64_t max_live_parameters)
    : comm_(comm),
      device_(device),
      partition_(partition),
      rank_(comm != nullptr ? comm->rank() : 0),
      master_(device.reserve_sparse(partition.padded_total() * kFloat)),
      workspace_(device.reserve_sparse(partition.padded_total() * kFloat)) {
  core::Zero3Regions layout(table, persistence_threshold);
  prefetch_.emplace(layout, prefetch_bucket_size, max_live_parameters);
  persistent_ = std::move(layout.persistent);
  regions_ = std::move(layout.regions);
  layers_ = layout.layers;
  chunks_ = layout.chunks;
  live_.assign(regions_.size(), false);
  queued_.resize(regions_.size());
  master_->commit(partition.begin(rank_) * kFloat, partition.end(rank_) * kFloat);
  kernels::commit_floats(*workspace_, persistent_);
  if (comm_ == nullptr) return;
  // Each rank's floats of the persistent tensors, packed in layout order:
  // one all-gather refreshes them all.
  packed_blocks_ = packed_range_blocks(persistent_, partition);
  const int64_t packed = packed_blocks_.displacements.back() + packed_blocks_.counts.back();
  if (packed > INT_MAX) {  // MPI (host staging) counts in ints
    status_ = core::Status(core::StatusCode::kInvalidArgument,
                           "ZeRO stage 3: more than INT_MAX persistent floats; lower "
                           "stage3_param_persistence_threshold");
    return;
  }
  packed_ = kernels::DeviceBuffer<float>(device, packed);
}

int64_t DeviceZero3Parameters::region_floats(int region) const {
  int64_t floats = 0;
  for (const auto& [begin, end] : regions_[region]) floats += end - begin;
  return floats;
}

DeviceZero3Parameters::~DeviceZero3Parameters() {
  for (int region = 0; region < static_cast<int>(queued_.size()); ++region) {
    (void)wait_gathered(region);
  }
}

void DeviceZero3Parameters::start_gather(const std::vector<Range>& ranges, float* into,
                                         int64_t from,
                                         std::vector<std::unique_ptr<comm::Work>>& queued) {
  for (const auto& [begin, end] : ranges) {
    if (comm_ == nullptr) {
      device_.copy_device_to_device(into + (begin - from), master() + begin,
                                    (end - begin) * kFloat);
      continue;
    }
    // Rank r gives the range's floats in its partition, straight from it.
    comm::Blocks blocks;
    for (int r = 0; r < partition_.ranks; ++r) {
      const int64_t first = std::clamp(partition_.begin(r), begin, end);
      const int64_t last = std::clamp(partition_.end(r), begin, end);
      blocks.displacements.push_back(first - begin);
      blocks.counts.push_back(last - first);
    }
    const float* mine = master() + begin + blocks.displacements[rank_];
    queued.push_back(comm_->all_gather(comm::buffer_of(mine, blocks.counts[rank_]),
                                       comm::buffer_of(into + (begin - from), end - begin),
                                       blocks));
  }
}

core::Status DeviceZero3Parameters::gather(const std::vector<Range>& ranges, float* into,
                                           int64_t from) {
  std::vector<std::unique_ptr<comm::Work>> queued;
  start_gather(ranges, into, from, queued);
  core::Status first;
  for (const std::unique_ptr<comm::Work>& work : queued) {
    core::Status status = work->wait();
    if (first.ok() && !status.ok()) first = status.with_context("parameter all-gather on the GPU");
  }
  return first;
}

core::Status DeviceZero3Parameters::wait_gathered(int region) {
  for (const std::unique_ptr<comm::Work>& work : queued_[region]) {
    core::Status status = work->wait();
    if (status_.ok() && !status.ok()) {
      status_ = status.with_context("parameter all-gather on the GPU");
    }
  }
  queued_[region].clear();
  return status_;
}

core::Status DeviceZero3Parameters::refresh_persistent() {
  // The parameters changed: nothing gathered before may stay (the passes
  // release all they request; this is what an interrupted one left).
  for (int region = 0; region < static_cast<int>(live_.size()); ++region) release(region);
  if (!status_.ok()) return status_;
  auto* workspace = static_cast<float*>(workspace_->data());
  if (comm_ == nullptr) {
    status_ = gather(persistent_, workspace);
    return status_;
  }
  const int64_t own_begin = partition_.begin(rank_);
  const int64_t own_end = partition_.end(rank_);
  float* mine = packed_.data() + packed_blocks_.displacements[rank_];
  for (const auto& [begin, end] : persistent_) {
    const int64_t from = std::max(begin, own_begin);
    const int64_t to = std::min(end, own_end);
    if (from >= to) continue;
    device_.copy_device_to_device(mine, master() + from, (to - from) * kFloat);
    mine += to - from;
  }
  auto work =
      comm_->all_gather(comm::buffer_of(packed_.data() + packed_blocks_.displacements[rank_],
                                        packed_blocks_.counts[rank_]),
                        comm::buffer_of(packed_.data(), packed_.size()), packed_blocks_);
  if (core::Status status = work->wait(); !status.ok()) {
    status_ = status.with_context("persistent parameters' all-gather on the GPU");
    return status_;
  }
  const float* from = packed_.data();
  for (const auto& [begin, end] : persistent_) {
    device_.copy_device_to_device(workspace + begin, from, (end - begin) * kFloat);
    from += end - begin;
  }
  return {};
}

void DeviceZero3Parameters::request(int region) {
  if (!status_.ok()) throw std::runtime_error(status_.message());
  try {
    kernels::commit_floats(*workspace_, regions_[region]);
  } catch (const std::bad_alloc&) {
    status_ =
        core::Status(core::StatusCode::kResourceExhausted,
                     fmt::format("the GPU has no room for ZeRO stage 3's gathered parameters "
                                 "({:.1f} MiB more); lower stage3_prefetch_bucket_size, "
                                 "stage3_max_live_parameters or the model's size per rank",
                                 static_cast<double>(region_floats(region)) * kFloat / (1 << 20)));
    throw std::runtime_error(status_.message());
  }
  live_[region] = true;
  live_floats_ += region_floats(region);
  start_gather(regions_[region], static_cast<float*>(workspace_->data()), 0, queued_[region]);
}

// The model reads what it acquires, so a region that cannot be gathered
// stops this rank: the exception reaches the worker, which reports it; the
// other ranks' collectives then fail as the job stops. What follows is
// requested before the host waits, so that its gathers queue at once.
template <typename PrefetchNext>
void DeviceZero3Parameters::acquire(int region, const PrefetchNext& prefetch_next) {
  if (!live_[region]) request(region);
  prefetch_next();
  if (!wait_gathered(region).ok()) throw std::runtime_error(status_.message());
}

void DeviceZero3Parameters::release(int region) {
  if (region < 0 || !live_[region]) return;
  // NCCL may still be writing a region prefetched and never acquired.
  (void)wait_gathered(region);
  kernels::release_floats(*workspace_, regions_[region]);
  live_[region] = false;
  live_floats_ -= region_floats(region);
}

void DeviceZero3Parameters::end_forward_only() {
  release(layers_);  // the last block's region
  release(0);        // the embeddings
}

void DeviceZero3Parameters::acquire_embeddings() {
  acquire(0, [this] { prefetch_->after_embeddings(*this); });
}

void DeviceZero3Parameters::acquire_vocab_chunk(int chunk, VocabUse use) {
  if (chunks_ == 0) return;
  acquire(1 + layers_ + chunk, [&] { prefetch_->after_vocab_chunk(*this, chunk, use); });
}

void DeviceZero3Parameters::release_vocab_chunk(int chunk, VocabUse) {
  if (chunks_ > 0) release(1 + layers_ + chunk);
}

void DeviceZero3Parameters::acquire_block(int layer, Pass pass) {
  acquire(1 + layer, [&] { prefetch_->after_block(*this, layer, pass == Pass::kForward); });
}

// The last block's forward is followed by its backward: it stays.
void DeviceZero3Parameters::release_block(int layer, Pass pass) {
  if (pass == Pass::kForward && layer == layers_ - 1) return;
  release(1 + layer);
}

core::Status DeviceZero3Parameters::read_whole(int64_t from, int64_t to, float* out) {
  if (!status_.ok()) return status_;
  constexpr int64_t kPiece = int64_t{4} << 20;
  kernels::DeviceBuffer<float> piece(device_, std::min(kPiece, std::max<int64_t>(to - from, 1)));
  for (int64_t begin = from; begin < to; begin += kPiece) {
    const int64_t end = std::min(begin + kPiece, to);
    if (core::Status status = gather({{begin, end}}, piece.data(), begin); !status.ok()) {
      return status;
    }
    device_.copy_device_to_host(out + (begin - from), piece.data(), (end - begin) * kFloat);
  }
  return {};
}

}  // namespace dslaunch::worker::engine
