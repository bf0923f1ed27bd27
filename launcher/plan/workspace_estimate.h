#pragma once

#include <cstdint>

#include "core/spec/job_spec.h"

namespace dslaunch::plan {

// What worker/parallel/gradient_reducer.h's GradientReducer lets wait for
// its communication thread before backward waits (kBucketsInFlight), and
// device_gradient_reducer.h's for its device stream.
inline constexpr int64_t kGradientBucketsInFlight = 2;

// The granularity of CUDA's virtual memory on current GPUs (the driver's
// recommended granularity), in which a GPU's sparse workspace takes memory.
inline constexpr int64_t kGpuPageBytes = int64_t{2} << 20;

// The memory a rank holds beside its model states and activations: ZeRO's
// working buffers, as the worker's MemoryReport measures them.
struct WorkspaceBytes {
  // ZeRO stage 3: the most of the gathered-parameter workspace resident at
  // once: the persistent tensors, the embeddings, the block (and vocabulary
  // chunk) in use, and what is prefetched ahead of it within
  // stage3_prefetch_bucket_size, all within stage3_max_live_parameters (but
  // never less than one pass step needs), replayed over a micro-batch
  // (core::gathered_peak_bytes). Gathers finish when they finish, so a run
  // may measure less than this; never more but for a page at the edges of
  // the ranges gathered (the host gives back whole pages only).
  int64_t parameter_workspace = 0;
  // ZeRO stages 2 and 3: the most of the gradient workspace backward
  // writes into resident at once: the block (or vocabulary chunk) being
  // written, the buckets waiting to be reduced (kGradientBucketsInFlight
  // with several ranks) and one not yet complete; at stage 2 also the token
  // embedding's gradient, which the output layer writes whole and the
  // encoder completes last.
  int64_t gradient_workspace = 0;
  // The gradient reducer's receive buffer (a bucket's share of this rank's
  // partition) and, with 16-bit or quantized gradient communication, the
  // narrowed buckets; at stage 3 the persistent tensors' packed copy,
  // ZeRO++'s secondary partition (zero_hpz_partition_size) and
  // offload_param nvme's staging buffer. Not counted: the transport's own
  // scratch, the compressed optimizers' message buffers, and the I/O
  // buffers of gradients swapped with offload_optimizer nvme (about 8 MB at
  // 124M with 1M-element buckets).
  int64_t communication = 0;

  int64_t total() const { return parameter_workspace + gradient_workspace + communication; }
};

// The workspaces of one rank of pipeline stage `stage` over a data group of
// `data_parallel` ranks, for micro-batches of `micro_batch` sequences.
WorkspaceBytes workspace_bytes_per_rank(const spec::ModelSpec& model,
                                        const spec::ParallelismSpec& parallel,
                                        const spec::TrainingSpec& training, int data_parallel,
                                        int64_t micro_batch, int stage);

// Training with every model state on a GPU (worker/engine/
// device_model_state.cc): no ZeRO workspace in host memory. In pages of
// kGpuPageBytes: at stages 2-3 over several data ranks backward's sparse
// gradient buffer (core::backward_gradient_peak_bytes) as the gradient
// workspace; at stage 3 the GPU's gathered parameters
// (core::gathered_peak_bytes) as the parameter workspace, and over
// several data ranks the persistent tensors' packed copy as communication
// buffers.
WorkspaceBytes device_workspace_bytes_per_rank(const spec::ModelSpec& model,
                                               const spec::ParallelismSpec& parallel,
                                               const spec::TrainingSpec& training,
                                               int data_parallel, int stage);

}  // namespace dslaunch::plan
