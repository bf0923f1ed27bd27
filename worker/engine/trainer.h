#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint/shard_file.h"
#include "core/layout/gpt2_config.h"
#include "core/layout/model_config.h"
#include "core/spec/job_spec.h"
#include "core/status.h"
#include "core/weights/hf_gpt2.h"
#include "kernels/backend.h"
#include "worker/comm/communicator.h"
#include "worker/data/training_data.h"

namespace dslaunch::worker::engine {

// What one optimizer step measured, the same on every rank.
struct StepReport {
  int64_t step = 0;  // counts from 1
  int64_t samples = 0;  // consumed by the end of this step, since the job began
  double loss = 0;   // mean cross-entropy over the global batch
  double lr = 0;
  double grad_norm = 0;  // global L2 norm before clipping
  double step_seconds = 0;
  // Of which in tensor-parallel all-reduces on this rank (0 without them),
  // and waiting for the neighbouring pipeline stages (the bubble and the
  // transfers; 0 without pipeline parallelism).
  double tensor_comm_seconds = 0;
  double pipeline_wait_seconds = 0;
  // Where the step's time went (DeepSpeed's wall_clock_breakdown): forward
  // and backward passes (the backward's overlapped gradient exchange
  // included, and at ZeRO stages 2-3 its waits for buckets in flight), waiting for the gradient exchange after the last backward,
  // and the rest up to the update (loss and norm all-reduces, clipping, the
  // optimizer with its own communication).
  double forward_seconds = 0;
  double backward_seconds = 0;
  double gradient_wait_seconds = 0;
  double optimizer_seconds = 0;
  // Under pipeline parallelism, every stage's pipeline_wait_seconds (of this
  // rank's pipeline), in stage order; empty otherwise.
  std::vector<double> stage_wait_seconds;
  double tokens_per_second = 0;  // the whole job's
  double tflops = 0;             // achieved by the whole job (matrix products, as Megatron counts)
  std::optional<double> eval_loss;  // set on evaluation steps
  // fp16 training: the loss scale the step ran with, whether its gradients
  // overflowed (the step was skipped on every rank: no update, the learning
  // rate schedule held) and how many steps were skipped so far.
  std::optional<double> loss_scale;
  bool skipped = false;
  int64_t skipped_steps = 0;
  // Bytes this rank sent to its peers during the step (evaluation and
  // checkpoint included), as comm::wire_bytes counts them: in all, and over
  // the data group.
  int64_t comm_bytes = 0;
  int64_t data_comm_bytes = 0;
  // At steps whose optimizer averaged compressed: how many times fewer
  // bytes the data group's traffic took than an fp32 all-reduce of the
  // gradients would have.
  std::optional<double> compression_ratio;
};

// Bytes one rank holds for training, by kind (the ZeRO paper's accounting).
struct MemoryReport {
  int64_t parameters = 0;
  int64_t gradients = 0;  // under ZeRO stage 2, this rank's partition only
  int64_t optimizer_states = 0;
  int64_t activations = 0;
  int64_t communication_buffers = 0;
  // ZeRO stage 2 only (0 otherwise): the largest resident size measured
  // (mincore) of the full-size buffer backward accumulates into, whose pages
  // go back to the OS as their buckets are reduce-scattered. Kept apart from
  // `gradients` so that one stays ZeRO's model-state accounting.
  int64_t gradient_workspace_peak = 0;
  // ZeRO stage 3 only (0 otherwise): the same for the full-size buffer the
  // model reads parameters from, in which only the blocks gathered for the
  // pass at hand are resident (measured before each release).
  int64_t parameter_workspace_peak = 0;
  // bf16 products on a CPU that multiplies bf16 (oneDNN): their copy of the
  // weights, 2 bytes a parameter, at ZeRO stages 0-2 (0 otherwise).
  int64_t weight_copy = 0;
  // Training on a GPU (a backend whose memory is not the host's): the most
  // its memory held at once by the end of the first step, as the backend's
  // allocations count it (the model's mirror and activations); 0 on the CPU,
  // where the fields above count everything.
  int64_t device_peak = 0;
};

// This rank's part of a checkpoint at the end of a step: the floats [begin,
// end) of its parameter layout (its tensor slice of the model) and their
// Adam moments. The range is ZeRO's partition of the layout over the data
// group whatever the stage, so every stage writes the same shards and any
// layout can read them back. The pointers are valid during the callback
// only, unless `in_place`.
struct CheckpointSlice {
  int64_t step = 0;  // steps completed
  int rank = 0;      // in the data group
  int ranks = 1;
  int tensor_rank = 0;
  int stage = 0;
  int64_t total_parameters = 0;  // of the layout
  int64_t model_parameters = 0;  // of the whole model (ResumePoint::total_parameters)
  int64_t begin = 0;
  int64_t end = 0;
  int64_t optimizer_steps = 0;
  std::optional<core::LossScalerState> loss_scaler;         // fp16 training
  const std::vector<core::LayoutTensor>* layout = nullptr;  // of the whole parameter buffer
  std::vector<core::ShardArrayData> arrays;  // param, adam_m, adam_v: end - begin fp32 each
  // The optimizer's own state (compressed communication's error feedback),
  // and its arrays' data in the order of rank_state->arrays.
  std::optional<core::RankState> rank_state;
  std::vector<const void*> rank_arrays;
  // The arrays (none streamed) and rank_arrays point into the model state
  // itself, which nothing changes or frees before the next optimizer step:
  // a writer may read them where they are until TrainerOptions::before_update
  // is called, instead of copying them (DeepSpeed's FastPersist overlaps a
  // checkpoint's write with the next step's forward and backward this way).
  bool in_place = false;
};

// The header of `slice`'s shard, written by world rank `rank` of `ranks`.
inline core::ShardHeader shard_header(const CheckpointSlice& slice, int rank, int ranks) {
  core::ShardHeader header;
  header.step = slice.step;
  header.rank = rank;
  header.ranks = ranks;
  header.total_parameters = slice.total_parameters;
  header.begin = slice.begin;
  header.end = slice.end;
  header.optimizer_step = slice.optimizer_steps;
  header.loss_scaler = slice.loss_scaler;
  header.layout = *slice.layout;
  header.rank_state = slice.rank_state;
  return header;
}

// A checkpoint to continue from: `step` steps done, the parameters and Adam
// moments in `shards`, which together cover the whole layout (written with
// any number of ranks and any ZeRO stage).
struct ResumePoint {
  int64_t step = 0;
  // Samples consumed by then: where the data continues, whatever the global
  // batch was before (elasticity may have changed it).
  int64_t samples_seen = 0;
  // Of the whole model saved, as one rank without tensor or pipeline
  // parallelism holds it; must be this spec's.
  int64_t total_parameters = 0;
  std::vector<core::ShardLocation> shards;
};

struct TrainerOptions {
  comm::Communicator* data_comm = nullptr;  // the data-parallel group; required
  // Where train()'s backend's memory is not the host's (a GPU) and the
  // optimizer is offloaded: a backend whose memory is (the CPU backend),
  // which computes on the model states in host memory (norms, clipping, the
  // CPU Adam) while the model runs on the GPU (DeepSpeed's ZeRO-Offload;
  // spec::device_training_problem says what that path does not cover).
  // Required then; unused otherwise.
  kernels::Backend* host_backend = nullptr;
  // Training on a GPU with several data ranks and the optimizer there: makes
  // the data group's communicator over the GPU's memory from data_comm
  // (collective over it; the worker's is NCCL's), on which the gradients are
  // averaged and the partitions gathered there. Unset: host staging over
  // data_comm (comm/host_staged_communicator.h).
  std::function<core::StatusOr<std::unique_ptr<comm::Communicator>>(comm::Communicator& data)>
      device_communicator;
  // The tensor-parallel group (Megatron's tensor parallelism over its
  // ranks); null or of one rank: none.
  comm::Communicator* tensor_comm = nullptr;
  // The pipeline group, its ranks the stages in order (1F1B over the
  // micro-batches of a step; spec.parallelism.pipeline_partition splits the
  // blocks); null or of one rank: none.
  comm::Communicator* pipeline_comm = nullptr;
  // The plan's batch sizes (dslaunch sends them with the registration);
  // they must fit the data group's size. Unset: resolved from the spec for
  // it, as the plan does (tests and benchmarks without a controller).
  std::optional<spec::BatchSizes> batch;
  // Checked during every step on every rank; when it is true on any rank,
  // every rank evaluates and stops after that step.
  std::function<bool()> stop_requested;
  std::function<void(const StepReport&)> on_step;  // called on every rank
  std::function<void(int64_t)> on_step_started;    // the step about to run
  // Whether this rank's gradients of a step (from 1) are to be NaN: the
  // drill for one rank overflowing (testing.fault nan_gradient). Unset: never.
  std::function<bool(int64_t)> poison_gradients;
  // Once, after the first step, when the gradient workspace's peak is measured.
  std::function<void(const MemoryReport&)> on_memory;
  // Where comm_bytes are counted, and device_communicator's communicator
  // attached while it lives; null: not counted.
  comm::Transport* transport = nullptr;
  // Unset: start from the spec's initialisation at step 0.
  std::optional<ResumePoint> resume;
  // Checked during every step like stop_requested: when it is true on any
  // rank, every rank saves a checkpoint after that step.
  std::function<bool()> checkpoint_requested;
  // Called on every rank at the same steps: every checkpoint.interval steps,
  // after the last step, after a step that stops the run, and when
  // checkpoint_requested. It must copy what it keeps before returning
  // (training goes on at once), unless the slice is `in_place`; unset: no
  // checkpoints.
  std::function<void(const CheckpointSlice&)> save_checkpoint;
  // Called before each optimizer step, after the last step (before the
  // final parameters are taken) and before train() returns (or throws),
  // whatever happened: what reads an in-place slice must be done with it
  // when this returns.
  std::function<void()> before_update;
  // What the run changed that the user should hear of, once (rank 0 prints
  // it); unset: nothing is said.
  std::function<void(const std::string&)> on_notice;
  // Where the final weights go, called on every rank at the end of a run
  // that reached a step: with read(begin, end, out) giving floats of the
  // whole model's layout (ParameterTable of model_config(spec.model, 1)).
  // At ZeRO stage 3 without tensor or pipeline parallelism the parameters
  // come a range at a time from the partitions (or their swap files), and
  // TrainResult::params stays empty: over several data ranks `read` is then
  // collective, and every rank's callback must make the same reads (one
  // writes with core::write_hf_gpt2, the others call
  // core::read_hf_gpt2_sources). Otherwise they are gathered whole as
  // without it, and read from there. What it returns fails the run.
  std::function<core::Status(const core::ParameterReader& read)> write_final_weights;
};

struct TrainResult {
  int64_t steps = 0;  // optimizer steps completed (counting those before a resume)
  bool stopped = false;
  // The final parameters of the whole model, on every rank, laid out as one
  // rank holds it (ParameterTable of model_config(spec.model, 1)); empty
  // where TrainerOptions::write_final_weights read them a range at a time.
  std::vector<float> params;
  std::string error;
};

// Data-parallel training of the spec's GPT-2 on `data`: micro-batches with
// gradient accumulation, gradients averaged over the data group in buckets
// while the backward pass runs, clipping by global norm, AdamW under the
// spec's schedule, and evaluation every eval_interval steps and after the
// last. ZeRO stage 1 partitions the optimizer states; stage 2 also the
// gradients, reduce-scattered after every micro-batch's backward; stage 3
// also the parameters, each block all-gathered (the next one prefetched)
// around its forward and its backward and released after, tensors under
// param_persistence_threshold elements kept whole on every rank. The
// returned params are whole on every rank. Every rank of data_comm must call
// it with the same spec. The same global batch gives the same losses whatever the split between
// ranks and accumulation steps (up to floating-point summation order).
//
// Fails before the first step, on every rank alike, when the data holds a
// token outside model.vocab_size or too few tokens for eval_batches batches
// of micro_batch x seq_length.
TrainResult train(const spec::JobSpec& spec, const data::TrainingData& data,
                  kernels::Backend& backend, const TrainerOptions& options);

}  // namespace dslaunch::worker::engine
