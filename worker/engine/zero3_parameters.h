#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"
#include "core/layout/zero3_prefetch.h"
#include "core/status.h"
#include "worker/comm/communicator.h"
#include "worker/model/gpt2_model.h"
#include "worker/parallel/parameter_gatherer.h"
#include "worker/parallel/partition_swap.h"
#include "worker/parallel/releasable_buffer.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker::engine {

// DeepSpeed's stage 3 settings, all counted in floats (elements).
struct Zero3Settings {
  int64_t persistence_threshold = 0;  // stage3_param_persistence_threshold
  int64_t prefetch_bucket_size = 0;   // stage3_prefetch_bucket_size
  int64_t max_live_parameters = 0;    // stage3_max_live_parameters
  bool quantized_weights = false;     // ZeRO++'s zero_quantized_weights
  int hpz_partition_size = 1;         // ZeRO++'s zero_hpz_partition_size
};

// ZeRO stage 3's parameters on one rank: its partition of the fp32 weights
// (the ones its optimizer updates), a whole copy of every tensor with fewer
// than `persistence_threshold` elements, and a full-size workspace the model
// reads in which only the blocks in use are resident.
//
// As the model's ParameterSource it gathers, on a communication thread, the
// position embedding and ln_f at the start of forward (kept until the end
// of backward), the token embedding a vocabulary chunk at a time around
// each of its three uses (the encoder, the tied output layer forward and
// backward: DeepSpeed gathers a tied weight for each use too), each block
// just before its forward and its backward, and releases each block and
// chunk after use; the last block stays between forward and backward, which
// need it one after the other. Persistent tensors are never gathered nor
// released: they stay in the workspace, refreshed by refresh_persistent()
// after every optimizer step.
//
// Prefetching follows DeepSpeed's stage3_prefetch_bucket_size and
// stage3_max_live_parameters as core::Zero3Prefetch decides
// (core/layout/zero3_prefetch.h): the blocks and chunks that follow the one
// acquired, within the bucket and the live limit.
//
// Parameters on NVMe (offload_param device nvme, `swap`): the partition
// lives in a swap file. A block's floats of it are read just before the
// block is gathered (on the communication thread, so the read overlaps
// computation) and dropped from memory once the gather is done; the
// optimizer's step, checkpoints and the final gather bring the whole
// partition in around their use (load_partition(), store_partition()).
//
// Every rank of the group must make the same calls in the same order (the
// model does when all run the same passes). Not thread-safe.
class Zero3Parameters : public model::ParameterSource {
 public:
  // The initial parameters, a range of the layout at a time:
  // out[0, end - begin) = floats [begin, end); this rank reads its partition
  // (in pieces, written to the swap file as they come when there is one)
  // and the persistent tensors only. A failure of `initial` stops the
  // reading; the caller reports it. Collective over comm. On failure
  // error() says what.
  using InitialParameters = std::function<core::Status(int64_t begin, int64_t end, float* out)>;
  Zero3Parameters(comm::Communicator& comm, const core::ParameterTable& table,
                  const ZeroPartition& partition, const Zero3Settings& settings,
                  const InitialParameters& initial, std::unique_ptr<PartitionSwap> swap = nullptr);

  bool swapped() const { return swap_ != nullptr; }
  // With a swap file: reads the whole partition into master() (until
  // store_partition()), or only makes it count as there when the caller
  // overwrites all of it (`read` false); gives its pages back, writing it
  // first when it `changed` since it was loaded. Without one, both do
  // nothing.
  core::Status load_partition(bool read = true);
  core::Status store_partition(bool changed);
  // The same for floats [begin, end) of a swapped partition that is not
  // resident, for an optimizer step that streams it a group at a time:
  // load_range() reads them into master() (`read` false: the caller
  // overwrites them all), store_range() writes them back and drops them.
  core::Status load_range(int64_t begin, int64_t end, bool read);
  core::Status store_range(int64_t begin, int64_t end);
  // Floats [begin, end) of the partition into out, from memory or the swap
  // file, leaving what is resident as it is (checkpoints).
  core::Status read_range(int64_t begin, int64_t end, float* out);

  // "" or the first failure (setup or a gather).
  std::string error() const;

  // The whole layout's address space; this rank's partition holds its
  // weights (the optimizer updates them in place).
  float* master() { return master_.data(); }
  // What the model reads (forward()/backward()'s params).
  const float* workspace() { return workspace_.data(); }

  // After the optimizer step: every rank's updated persistent floats,
  // all-gathered into every rank's whole copy. Collective; "" or what failed.
  std::string refresh_persistent();
  // Releases what a forward pass leaves gathered for its backward (the
  // embeddings and the last block): call it after a forward pass that has
  // no backward, such as evaluation's.
  void end_forward_only();
  // The whole parameters (padded_total() floats) on every rank. Collective.
  std::string gather_whole(std::vector<float>& out);

  // Bytes held for parameters: this rank's partition (none when swapped)
  // plus the persistent copy.
  int64_t parameter_bytes() const;
  // The persistent tensors' packed buffer, the swap's staging buffer, and
  // hpZ's secondary partition.
  int64_t buffer_bytes() const;
  // The largest resident size of the workspace measured before a release.
  int64_t workspace_peak_bytes() const { return workspace_.peak_resident_bytes(); }

  void acquire_embeddings() override;
  void release_embeddings() override;
  void acquire_vocab_chunk(int chunk, VocabUse use) override;
  void release_vocab_chunk(int chunk, VocabUse use) override;
  void acquire_block(int layer, Pass pass) override;
  void release_block(int layer, Pass pass) override;

 private:
  // The region of the token embedding's vocabulary chunk `chunk`; none
  // (-1) when wte is persistent.
  int chunk_region(int chunk) const { return chunks_ == 0 ? -1 : 1 + layers_ + chunk; }
  // This rank's floats of `region`, dropped from memory after its gather
  // (swapped partitions only).
  void release_own(int region);
  // Calls fn(begin, end) for this rank's floats of each persistent range.
  template <typename Fn>
  void for_own_persistent(const Fn& fn) const;

  comm::Communicator& comm_;
  const core::ParameterTable& table_;
  ZeroPartition partition_;
  int rank_ = 0;
  int layers_ = 0;
  int chunks_ = 0;  // the token embedding's vocabulary chunks (0: wte is persistent)
  ReleasableBuffer master_;
  ReleasableBuffer workspace_;
  // Persistent tensors' ranges in layout order; packed_ holds their floats
  // in that order, so each rank's share is one contiguous run of it.
  std::vector<ParameterGatherer::Range> persistent_;
  std::vector<float> packed_;
  comm::Blocks packed_blocks_;
  std::string setup_error_;
  std::unique_ptr<PartitionSwap> swap_;
  bool partition_resident_ = true;                              // false while swapped out
  std::vector<std::vector<ParameterGatherer::Range>> regions_;  // as given to the gatherer
  // Region 0: wpe and ln_f; 1 + l: block l; 1 + layers + k: wte's vocabulary chunk k.
  std::optional<ParameterGatherer> gatherer_;
  std::optional<core::Zero3Prefetch> prefetch_;
};

}  // namespace dslaunch::worker::engine
