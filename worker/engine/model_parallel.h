#pragma once

// What tensor and pipeline parallelism add to a training step, beside the
// model's own collectives: which gradients count in a rank's part of the
// norm, the tied embedding's two copies, and the whole model from its slices.

#include <cstdint>
#include <utility>
#include <vector>

#include "core/layout/parameter_table.h"
#include "core/spec/job_spec.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "worker/comm/communicator.h"

namespace dslaunch::worker::engine {

// This rank's slice of the model: its tensor rank in `tensor`, its stage in
// `pipeline` and that stage's blocks (or chunks, with
// parallel.virtual_stages) by parallel.pipeline_partition (either group may
// be null: none). An error, saying what to change, when the model cannot be
// cut so, a step's `accumulation` micro-batches are fewer than the stages
// (1F1B needs one per stage) or, interleaved, not a multiple of them.
core::StatusOr<core::ModelShard> model_shard(const spec::ParallelismSpec& parallel,
                                             const core::Gpt2Config& config,
                                             comm::Communicator* tensor,
                                             comm::Communicator* pipeline, int64_t accumulation);

// The ranges of `table`'s layout that count in this rank's part of the
// gradient norm (ModelStateInputs::norm_ranges): empty (all) without model
// parallelism; under tensor parallelism the replicated tensors on tensor
// rank 0 only; the last stage's copy of the tied embedding never.
std::vector<std::pair<int64_t, int64_t>> norm_ranges(const core::ParameterTable& table);

// The whole model's parameters from every rank's slice (`local`, laid out
// by `table`): the tensor group's slices are gathered, and the pipeline
// stages' tensors summed into place (each stage contributes only its own,
// the tied embedding from the first stage). Laid out by `whole_table`, whose
// vocabulary may be padded to fewer or more rows than the job's (padding
// rows are dropped or zero). Every rank gets them all. Either group may be
// null (none).
core::StatusOr<std::vector<float>> gather_whole_model(comm::Communicator* tensor_comm,
                                                      comm::Communicator* pipeline_comm,
                                                      const core::ParameterTable& table,
                                                      std::vector<float> local,
                                                      const core::ParameterTable& whole_table);

// Where the other end's gradient of the tied embedding arrives: kept from
// step to step (it is as large as the embedding).
struct TiedEmbeddingBuffers {
  std::vector<float> received;  // host memory, for the communicator
  // Where the backend's memory is not the host's: a host copy of this
  // end's, to send and to sum into.
  std::vector<float> sent;
};

// The tied embedding's two copies, on the first and the last stage, get the
// sum of both gradients (Megatron's embedding group), so that they stay
// equal. a + b and b + a are the same float: both ends get the same bits.
// Called on the first and the last stage of `pipeline`, with the step's
// reduced gradients.
core::Status sum_tied_embedding_gradients(comm::Communicator& pipeline,
                                          const core::ParameterTable& table,
                                          kernels::Backend& backend, float* grads,
                                          TiedEmbeddingBuffers& buffers);

}  // namespace dslaunch::worker::engine
