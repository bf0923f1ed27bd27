#include "worker/engine/model_parallel.h"

#include <algorithm>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "core/layout/pipeline_partition.h"


namespace dslaunch::worker::engine {

core::StatusOr<core::ModelShard> model_shard(const spec::ParallelismSpec& parallel,
                                             const core::Gpt2Config& config,
                                             comm::Communicator* tensor,
                                             comm::Communicator* pipeline, int64_t accumulation) {
  core::ModelShard shard;
  shard.tensor_size = tensor != nullptr ? tensor->size() : 1;
  shard.tensor_rank = tensor != nullptr ? tensor->rank() : 0;
  shard.stages = pipeline != nullptr ? pipeline->size() : 1;
  shard.stage = pipeline != nullptr ? pipeline->rank() : 0;
  const int stages = shard.stages;
  if (stages > 1 && accumulation < stages) {
    return core::invalid_argument(fmt::format(
        "pipeline parallelism over {} stages needs at least {} micro-batches per step, and "
        "gradient_accumulation_steps is {}: raise train_batch_size or lower "
        "train_micro_batch_size_per_gpu",
        stages, stages, accumulation));
  }
  const int chunks = stages > 1 ? parallel.virtual_stages : 1;
  if (chunks > 1 && accumulation % stages != 0) {
    return core::invalid_argument(fmt::format(
        "the interleaved schedule (parallelism.virtual_stages {}) runs micro-batches in groups "
        "of the {} stages, and gradient_accumulation_steps is {}: make it a multiple of {}",
        chunks, stages, accumulation, stages));
  }
  if (int64_t{stages} * chunks > config.num_layers) {
    return core::invalid_argument(fmt::format("{} pipeline stages x {} virtual stages for {} "
                                              "blocks: each virtual stage needs one",
                                              stages, chunks, config.num_layers));
  }
  spec::ParallelismSpec grid = parallel;
  grid.pipeline = stages;
  grid.virtual_stages = chunks;
  if (grid.pipeline_partition == spec::PipelinePartition::kExplicit &&
      static_cast<int>(grid.stage_layers.size()) != grid.virtual_stage_count()) {
    return core::invalid_argument(
        fmt::format("parallelism.pipeline_partition names {} stages; the job has {}",
                    grid.stage_layers.size(), grid.virtual_stage_count()));
  }
  shard.chunks = core::rank_chunks(core::stage_layer_ranges(config, grid), stages, shard.stage);
  if (std::string problem = core::shard_problem(config, shard); !problem.empty()) {
    return core::invalid_argument(fmt::format("parallelism.tensor {}, pipeline {}: {}",
                                              shard.tensor_size, stages, problem));
  }
  return shard;
}

std::vector<std::pair<int64_t, int64_t>> norm_ranges(const core::ParameterTable& table) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  const bool tied_copy = table.has_head() && !table.has_embeddings();
  if (table.shard().tensor_size == 1 && !tied_copy) return ranges;
  const bool counts_replicated = table.shard().tensor_rank == 0;
  for (const core::TensorInfo& t : table.tensors()) {
    if (t.split.whole() && !counts_replicated) continue;
    if (t.role == core::TensorRole::kWte && tied_copy) continue;
    if (!ranges.empty() && ranges.back().second == t.offset) {
      ranges.back().second += t.numel;
    } else {
      ranges.emplace_back(t.offset, t.offset + t.numel);
    }
  }
  return ranges;
}

core::StatusOr<std::vector<float>> gather_whole_model(comm::Communicator* tensor_comm,
                                                      comm::Communicator* pipeline_comm,
                                                      const core::ParameterTable& table,
                                                      std::vector<float> local,
                                                      const core::ParameterTable& whole_table) {
  const int size = tensor_comm != nullptr ? tensor_comm->size() : 1;
  std::vector<float> slices;
  if (tensor_comm != nullptr) {
    slices.resize(static_cast<size_t>(size) * table.total());
    core::Status status =
        tensor_comm
            ->all_gather(comm::buffer_of(local.data(), table.total()),
                         comm::buffer_of(slices.data(), static_cast<int64_t>(slices.size())),
                         comm::Blocks::consecutive(std::vector<int64_t>(size, table.total())))
            ->wait();
    if (!status.ok()) return status.with_context("gathering the tensor slices of the parameters");
  } else {
    slices = std::move(local);
  }
  std::vector<float> whole(whole_table.total(), 0.0f);
  std::vector<float> global;  // one tensor's whole values, as this layout pads it
  for (const core::TensorInfo& target : whole_table.tensors()) {
    if (table.find(target.name) == nullptr) continue;  // another stage's
    if (target.role == core::TensorRole::kWte && !table.has_embeddings()) continue;  // tied copy
    global.assign(target.numel, 0.0f);
    for (int r = 0; r < size; ++r) {
      core::ModelShard shard = table.shard();
      shard.tensor_rank = r;
      const core::ParameterTable rank_table(table.config(), shard);
      const core::TensorInfo& t = rank_table.tensor(target.role, target.layer);
      int64_t elements = 1;
      for (const int64_t dim : t.global_shape) elements *= dim;
      global.resize(std::max<int64_t>(elements, target.numel), 0.0f);
      core::copy_into_global(t, slices.data() + static_cast<size_t>(r) * table.total() + t.offset,
                             global.data(), sizeof(float));
    }
    // Row-major with the same columns: the leading elements are the rows both hold.
    std::copy_n(global.begin(), target.numel, whole.begin() + target.offset);
  }
  if (pipeline_comm != nullptr) {
    // Each element comes from one stage and is zero on the others: the sum
    // is exact.
    core::Status status =
        pipeline_comm
            ->all_reduce(comm::buffer_of(whole.data(), static_cast<int64_t>(whole.size())),
                         comm::ReduceOp::kSum)
            ->wait();
    if (!status.ok()) return status.with_context("gathering the pipeline stages' parameters");
  }
  return whole;
}

core::Status sum_tied_embedding_gradients(comm::Communicator& pipeline,
                                          const core::ParameterTable& table,
                                          kernels::Backend& backend, float* grads,
                                          TiedEmbeddingBuffers& buffers) {
  const core::TensorInfo& wte = table.tensor(core::TensorRole::kWte);
  const int other = table.has_embeddings() ? pipeline.size() - 1 : 0;
  const int64_t bytes = wte.numel * static_cast<int64_t>(sizeof(float));
  std::vector<float>& theirs = buffers.received;
  theirs.resize(wte.numel);
  // MPI reads host memory only: where the backend's memory is not the
  // host's, the gradient goes out from a host copy, and the sum is taken
  // there (a + b is the same float on either side) and copied back, so the
  // device holds no second embedding-sized buffer.
  const bool staged = !backend.memory_is_host();
  float* mine = grads + wte.offset;
  if (staged) {
    buffers.sent.resize(wte.numel);
    backend.copy_device_to_host(buffers.sent.data(), mine, bytes);
    mine = buffers.sent.data();
  }
  backend.synchronize();
  auto sent = pipeline.send(comm::buffer_of(mine, wte.numel), other);
  core::Status received = pipeline.recv(comm::buffer_of(theirs.data(), wte.numel), other)->wait();
  core::Status status = sent->wait();
  if (!received.ok()) status = received;
  if (!status.ok()) return status.with_context("summing the tied embedding's gradients");
  if (staged) {
    for (int64_t i = 0; i < wte.numel; ++i) mine[i] += theirs[i];
    backend.copy_host_to_device(grads + wte.offset, mine, bytes);
    return {};
  }
  backend.residual_forward(grads + wte.offset, grads + wte.offset, theirs.data(), wte.numel);
  return {};
}

}  // namespace dslaunch::worker::engine
