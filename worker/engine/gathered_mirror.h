#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/layout/parameter_table.h"
#include "core/layout/zero3_regions.h"
#include "kernels/backend.h"
#include "kernels/sparse_memory.h"
#include "worker/engine/device_mirror.h"
#include "worker/model/gpt2_model.h"

namespace dslaunch::worker::engine {

// ZeRO stage 3 on a GPU with offload (offload_optimizer, and the
// parameters' partitions in host memory or, with offload_param nvme, in a
// swap file): the host's ZeRO state keeps every model state and gathers
// each region into its host workspace (Zero3Parameters: MPI's all-gathers
// and prefetching on its communication thread), and this mirror copies
// each region the host has gathered into a sparse GPU workspace over the
// whole layout's addresses (kernels/sparse_memory.h) around the model's use
// of it, giving its pages back after. It stands between the model and the
// host state's hooks: each acquire is the host's and then an upload, each
// release the GPU's pages and then the host's, with the host's rule that
// the last block stays from its forward to its backward. The persistent
// tensors stay on the GPU, uploaded again after every optimizer step.
//
// It is the model's gradient sink too: the output layer's part of the
// token embedding's gradient, a vocabulary chunk at a time, is taken from
// the GPU's gradient buffer (DeviceMirror::take_gradient_part(), which leaves
// it zero) into the host's before the host state's sink reduces it, as the
// host engine takes it from its own buffer.
class GatheredMirror final : public model::ParameterSource, public model::OutputGradientSink {
 public:
  // `host_source` and `host_sink` are the host state's (the model's until
  // now); `host_workspace` is where it gathers (its parameters_for_model()),
  // `host_gradients` its gradient buffer. Throws std::bad_alloc when the
  // GPU has no room for the persistent tensors. All must outlive it.
  GatheredMirror(kernels::Backend& device, const core::ParameterTable& table,
                 int64_t persistence_threshold, model::ParameterSource& host_source,
                 model::OutputGradientSink& host_sink, const float* host_workspace,
                 DeviceMirror& gradients, float* host_gradients);

  // What the model reads.
  const float* workspace() const { return static_cast<const float*>(workspace_->data()); }
  // The persistent tensors from the host workspace: once the host state
  // holds them, and after every optimizer step.
  void upload_persistent();
  // After a forward pass with no backward: the GPU's pages of what that
  // pass leaves gathered (the embeddings and the last block). The host
  // state releases its own (ModelState::after_forward_only()).
  void end_forward_only();
  // The GPU workspace's most resident bytes (persistent tensors included).
  int64_t workspace_peak_bytes() const { return workspace_->peak_resident_bytes(); }

  void acquire_embeddings() override;
  void release_embeddings() override;
  void acquire_vocab_chunk(int chunk, VocabUse use) override;
  void release_vocab_chunk(int chunk, VocabUse use) override;
  void acquire_block(int layer, Pass pass) override;
  void release_block(int layer, Pass pass) override;

  void output_part_ready(int64_t begin, int64_t end) override;
  void wait_output_parts() override { host_sink_.wait_output_parts(); }

 private:
  // Commits and uploads `region` unless it is on the GPU already; throws
  // std::runtime_error when the GPU has no room.
  void upload(int region);
  void release(int region);
  void upload_ranges(const std::vector<core::Zero3Regions::Range>& ranges);

  kernels::Backend& device_;
  const core::Zero3Regions regions_;
  model::ParameterSource& host_source_;
  model::OutputGradientSink& host_sink_;
  const float* host_workspace_;
  DeviceMirror& gradients_;
  float* host_gradients_;
  std::unique_ptr<kernels::SparseMemory> workspace_;
  std::vector<bool> live_;
};

}  // namespace dslaunch::worker::engine
