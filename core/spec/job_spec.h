#pragma once

// The job spec, parsed once into these structs (see spec_parser.h). Every
// tunable is declared here once, with its default; the README's job-spec
// reference mirrors this file.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/spec/batch_size.h"

namespace dslaunch::spec {

enum class Runner { kLocal, kOpenMpi, kSlurm };
// auto: the planner picks (launcher/plan/device_choice.h); a planned spec
// holds cpu or cuda.
enum class Device { kCpu, kCuda, kAuto };

struct InlineHost {
  std::string host;
  int slots = 0;
  int line = 0;  // line in the spec file, for error messages
};

// What the planner may assume about the inside of every host, when it cannot
// look (remote hosts) or should not (reproducible plans).
struct TopologyHint {
  int cores_per_host = 0;                     // 0: this machine's core count
  int numa_nodes_per_host = 0;                // 0: this machine's NUMA node count
  std::vector<std::vector<int>> gpu_islands;  // empty: from `nvidia-smi topo -m`, else one island
  double device_memory_gb = 0;                // 0: unknown (CUDA) or host memory per rank (CPU)
};

// TLS on the control plane, for multi-host jobs: the controller serves with
// `cert` and `key`; ranks and the CLI verify it with `ca`. All three or none.
struct TlsSpec {
  std::string cert;
  std::string key;
  std::string ca;  // must be readable at the same path on every rank's host
  // Mutual TLS: each rank proves its rank with a certificate the job issues
  // it (proto/rank_certificates.h).
  bool client_certificates = true;
  bool enabled() const { return !cert.empty(); }
};

struct ClusterSpec {
  Runner runner = Runner::kLocal;
  Device device = Device::kAuto;
  std::string hostfile;  // resolved against the spec's folder; "" = none
  std::vector<InlineHost> hosts;
  std::string include;  // DeepSpeed --include syntax: host1:0,1@host2
  std::string exclude;
  int num_nodes = -1;  // -1: every host
  int num_gpus = -1;   // ranks per host; -1: every slot (local: every GPU, or 1 CPU rank)
  int ssh_port = 22;
  // MASTER_ADDR and MASTER_PORT the ranks get (DeepSpeed's --master_addr and
  // --master_port): "" = rank 0's host; 0 = a port free on this host.
  std::string master_addr;
  int master_port = 0;
  // The controller's Prometheus endpoint (GET /metrics on every interface);
  // 0 = none.
  int metrics_port = 0;
  // A file holding the bearer token scrapes must send (Prometheus's
  // authorization.credentials_file); "" = none asked.
  std::string metrics_token_file;
  // An interface name (eth0) or an IPv4 subnet (10.0.0.0/16): where MPI's
  // TCP traffic goes and where the controller listens; "" = Open MPI chooses.
  std::string network_interface;
  // Extra arguments for mpirun or srun (DeepSpeed's --launcher_args), split
  // as a shell would.
  std::vector<std::string> launcher_args;
  std::string
      controller_address;  // host[:port]; "" = loopback (1 host) or the first routable address
  TopologyHint topology;
  TlsSpec tls;
};

// How the transformer blocks are split into pipeline stages (DeepSpeed's
// partition_method): balanced by parameter count, the embeddings and the
// output layer included (the default, as DeepSpeed's); the same number of
// blocks per stage; or the counts given.
enum class PipelinePartition { kParameters, kUniform, kExplicit };

struct ParallelismSpec {
  int tensor = 1;
  int pipeline = 1;
  PipelinePartition pipeline_partition = PipelinePartition::kParameters;
  // kExplicit: blocks per virtual stage (per stage without interleaving), in order.
  std::vector<int> stage_layers;
  // Model chunks per pipeline rank (Megatron's interleaved schedule): the
  // blocks are cut into pipeline x virtual_stages virtual stages, and rank
  // s runs virtual stages s, s + pipeline, s + 2 pipeline, ...
  int virtual_stages = 1;
  int virtual_stage_count() const { return pipeline * virtual_stages; }
};

// GPT-2 architecture; the defaults are GPT-2 small (124M).
struct ModelSpec {
  int num_layers = 12;
  int hidden_size = 768;
  int num_attention_heads = 12;
  int vocab_size = 50257;
  int seq_length = 1024;
  // Rows of the position embedding (Megatron's max_position_embeddings):
  // the longest sequence the model can take; 0 = seq_length. Larger than
  // seq_length to fine-tune weights trained on longer sequences (GPT-2's
  // 1024) on shorter ones without cutting their position embedding.
  int max_position_embeddings = 0;
  double dropout = 0.0;
  uint64_t init_seed = 1234;
  // The embedding is padded to a multiple of this times the tensor size, as
  // Megatron does, so it splits evenly and its matrix products stay aligned.
  int make_vocab_size_divisible_by = 128;
};

enum class DataFormat { kAuto, kLlmc, kMegatron };

// One dataset of data.train: token files or Megatron prefixes (absolute
// paths, or glob patterns such as shards/train_*.bin, matched in sorted
// order when the data is opened) read one after the other, drawn from with
// `weight` among the others (Megatron's blend).
struct Dataset {
  double weight = 1;
  std::vector<std::string> paths;

  bool operator==(const Dataset&) const = default;
};

inline constexpr const char* kDemoData = "demo";

struct DataSpec {
  // One dataset for a path, pattern or list of them; several for a blend
  // [w1, p1, w2, p2, ...]. {{1, {"demo"}}}: the built-in corpus.
  std::vector<Dataset> train;
  // Read one after the other; empty = held out of each training dataset.
  std::vector<std::string> valid;
  DataFormat format = DataFormat::kAuto;

  bool demo() const {
    return train.size() == 1 && train[0].paths == std::vector<std::string>{kDemoData};
  }
  // `path` as the only training dataset (or "demo").
  void train_on(std::string path) { train = {{1, {std::move(path)}}}; }
};

struct Fp16Spec {
  bool enabled = false;
  double loss_scale = 0;  // 0: dynamic loss scaling
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
  // DeepSpeed's DynamicLossScaler argument (ZeRO stages 1-3): an overflow
  // with the scale at min_loss_scale ends the run.
  bool raise_error_at_min_scale = true;
};

enum class OffloadDevice { kNone, kCpu, kNvme };

struct OffloadSpec {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  bool pin_memory = false;
  int buffer_count = 4;  // swap buffers in memory (nvme)
  // offload_optimizer only: the fraction of the optimizer states moved to
  // host memory, the rest kept on the GPU (DeepSpeed's partial offload,
  // device cpu only).
  double ratio = 1.0;
};

// DeepSpeed's zero_optimization section and defaults.
struct ZeroSpec {
  int stage = 0;
  int64_t reduce_bucket_size = 500'000'000;
  int64_t allgather_bucket_size = 500'000'000;
  bool overlap_comm = false;  // DeepSpeed turns it on by default for stage 3
  bool contiguous_gradients = true;
  int64_t prefetch_bucket_size = 50'000'000;      // stage3_prefetch_bucket_size
  int64_t param_persistence_threshold = 100'000;  // stage3_param_persistence_threshold
  int64_t max_live_parameters = 1'000'000'000;    // stage3_max_live_parameters
  OffloadSpec offload_optimizer;
  OffloadSpec offload_param;  // stage 3 only
  // ZeRO++ (stage 3): the parameters' all-gathers and the gradients'
  // reduce-scatters in int8 blocks, and a secondary copy of the parameters
  // partitioned within groups of this many consecutive data ranks (a host),
  // from which the backward pass gathers them; 1 = none.
  bool quantized_weights = false;    // zero_quantized_weights
  bool quantized_gradients = false;  // zero_quantized_gradients
  int hpz_partition_size = 1;        // zero_hpz_partition_size
  // Elements the optimizer updates at a time; with offload to NVMe, what
  // one swap buffer holds.
  int64_t sub_group_size = 1'000'000'000;
};

enum class OptimizerType { kAdam, kAdamW, kLamb, kOneBitAdam, kZeroOneAdam, kOneBitLamb };
// Whether the optimizer averages its own data-parallel traffic, compressed
// to signs after a warm-up (1-bit Adam, 0/1 Adam, 1-bit LAMB).
// DeepSpeed's name of the type: "AdamW", "OneBitAdam", ...
inline const char* optimizer_type_name(OptimizerType type) {
  switch (type) {
    case OptimizerType::kAdam:
      return "Adam";
    case OptimizerType::kAdamW:
      return "AdamW";
    case OptimizerType::kLamb:
      return "Lamb";
    case OptimizerType::kOneBitAdam:
      return "OneBitAdam";
    case OptimizerType::kZeroOneAdam:
      return "ZeroOneAdam";
    case OptimizerType::kOneBitLamb:
      return "OneBitLamb";
  }
  return "?";
}
inline bool compresses_communication(OptimizerType type) {
  return type == OptimizerType::kOneBitAdam || type == OptimizerType::kZeroOneAdam ||
         type == OptimizerType::kOneBitLamb;
}

// DeepSpeed's optimizer section: its "Adam" decouples weight decay (AdamW)
// unless params.adam_w_mode is false, and its defaults are FusedAdam's,
// FusedLamb's and those of DeepSpeed's 1-bit optimizers.
struct OptimizerSpec {
  OptimizerType type = OptimizerType::kAdamW;
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled_weight_decay = true;
  // Lamb: the step's bias correction and where eps goes (sqrt(v + eps)
  // when inside); Lamb and 1-bit LAMB: the trust ratio's bounds.
  bool bias_correction = true;
  bool eps_inside_sqrt = false;
  double max_coeff = 10.0;
  double min_coeff = 0.01;
  // 1-bit Adam and 1-bit LAMB: steps of full-precision warm-up, after which
  // the variance freezes and the momentum travels compressed.
  int64_t freeze_step = 100000;
  // 0/1 Adam: the variance's update intervals double every
  // var_update_scaler updates until var_freeze_step; then the local-step
  // interval doubles every local_step_scaler steps up to local_step_clipper.
  int64_t var_freeze_step = 100000;
  int64_t var_update_scaler = 16;
  int64_t local_step_scaler = 32678;
  int64_t local_step_clipper = 16;
  // 1-bit LAMB's frozen trust ratio and its scaling factor's bounds.
  double coeff_beta = 0.9;
  double factor_max = 4.0;
  double factor_min = 0.5;
  double factor_threshold = 0.1;
};

enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupType { kLog, kLinear };

// DeepSpeed's schedulers and their parameter names and defaults.
struct SchedulerSpec {
  SchedulerType type = SchedulerType::kNone;
  double warmup_min_lr = 0;      // WarmupLR, WarmupDecayLR
  double warmup_max_lr = 0.001;  // WarmupLR, WarmupDecayLR
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps = 0;    // WarmupDecayLR, WarmupCosineLR (required there)
  double warmup_min_ratio = 0;    // WarmupCosineLR
  double cos_min_ratio = 0.0001;  // WarmupCosineLR
};

// DeepSpeed's activation_checkpointing section: present, it turns on
// block-by-block recompute (Megatron's full recompute).
struct ActivationCheckpointingSpec {
  bool enabled = false;  // the section is there
  // Each block's saved input split across the tensor group.
  bool partition_activations = false;
  // How many blocks of each pipeline stage are recomputed, from its first;
  // unset: all of them.
  std::optional<int64_t> number_checkpoints;
  // Accepted for DeepSpeed configs; the CPU backend keeps activations in
  // host memory and in one buffer already, and has no streams to sync.
  bool cpu_checkpointing = false;
  bool contiguous_memory_optimization = false;
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
};

// DeepSpeed's elasticity section, its keys and defaults: a global batch
// that suits many data-parallel sizes, and for the job's size the micro batch
// and accumulation that make it up (elasticity.h). Enabled, it takes the
// place of train_batch_size, train_micro_batch_size_per_gpu and
// gradient_accumulation_steps.
struct ElasticitySpec {
  bool enabled = false;
  int64_t max_train_batch_size = 2000;                 // required when enabled
  std::vector<int64_t> micro_batch_sizes = {2, 4, 6};  // required when enabled; in the order given
  // The sizes to suit: data-parallel sizes in version 0.1, GPUs (ranks) in
  // version 0.2, which counts them in whole nodes of num_gpus_per_node.
  int min_gpus = 1;
  int max_gpus = 10000;
  double min_time = 0;   // minutes a scheduler lets the job run before rescaling it; not used here
  double version = 0.2;  // 0.1 or 0.2
  bool prefer_larger_batch = true;
  // True: the three batch keys may stay in the spec, and are ignored.
  bool ignore_non_elastic_batch_info = false;
  std::optional<int> model_parallel_size;  // version 0.2; unset: parallelism.tensor x pipeline
  int num_gpus_per_node = 1;               // version 0.2: ranks per node
};

// DeepSpeed's communication_data_type: the element type gradients are
// averaged in over the data group (summed in fp32 whatever it is). Unset:
// the training's precision, as DeepSpeed defaults it.
enum class CommunicationDataType { kDefault, kFp32, kFp16, kBf16 };

// DeepSpeed's tensorboard and csv_monitor sections.
struct MonitorOutput {
  bool enabled = false;
  std::string output_path;  // "" = <job dir>/tensorboard or <job dir>/csv_monitor
  std::string job_name;     // "" = the job's name; the files go to output_path/job_name
};

// What a run reports besides metrics.jsonl (DeepSpeed's monitoring keys).
struct MonitorSpec {
  MonitorOutput tensorboard;
  MonitorOutput csv_monitor;
  // comms_logger.enabled: rank 0 prints each collective's count, bytes and
  // time by operation and group after training (and every steps_per_print).
  bool comms_logger = false;
  // Rank 0 prints a step's line every this many steps (and evaluation and
  // last steps); DeepSpeed's default prints none, dslaunch's every step.
  int64_t steps_per_print = 1;
  // The printed line also gives the step's forward, backward, gradient wait
  // and optimizer times (they are in metrics.jsonl either way).
  bool wall_clock_breakdown = false;
};

// DeepSpeed's aio section: how NVMe offload's swap files reach the drive
// (io_uring here, where DeepSpeed uses libaio threads).
struct AioSpec {
  int64_t block_size = 1'048'576;  // bytes one request moves at most
  int queue_depth = 8;             // requests in flight per swap file
  bool single_submit = false;      // submit requests one by one
};

struct TrainingSpec {
  BatchInput batch;  // as given; resolved against the data-parallel size by the plan
  int64_t steps = 0;
  Fp16Spec fp16;
  bool bf16 = false;  // bf16.enabled
  CommunicationDataType communication_data_type = CommunicationDataType::kDefault;
  ZeroSpec zero;
  AioSpec aio;
  OptimizerSpec optimizer;
  SchedulerSpec scheduler;
  // Max global gradient norm; 0 = no clipping. DeepSpeed's default is 1.0
  // (deepspeed/runtime/constants.py, GRADIENT_CLIPPING_DEFAULT).
  double gradient_clipping = 1.0;
  uint64_t seed = 1234;          // the order training samples are drawn in
  int64_t eval_interval = 0;     // steps between evaluations; 0 = only after the last step
  int64_t eval_batches = 8;      // consecutive (micro batch, seq_length) windows of the valid split
  ActivationCheckpointingSpec activation_checkpointing;
  ElasticitySpec elasticity;
  MonitorSpec monitor;
  // Hugging Face GPT-2 weights (.safetensors) the first attempt starts from
  // instead of a random initialisation; "" = random (model.init_seed). A
  // resume continues from its checkpoint.
  std::string init_from;
};

struct CheckpointSpec {
  std::string dir;       // "" = <job dir>/checkpoints
  int64_t interval = 0;  // steps between checkpoints; 0 = only at the end
  int keep = 3;          // newest checkpoints kept; the newest valid one is never deleted
  // State in memory is written from where it is while the next step's
  // forward and backward run (its optimizer step waits for the rest);
  // false: copied to host buffers first, then written in the background.
  bool write_in_place = true;
};

struct FaultToleranceSpec {
  int max_restarts = 0;
  double heartbeat_interval_s = 5;
  double heartbeat_timeout_s = 60;
  // A rank that heartbeats but stays at one step this long is hung; 0 = never.
  // 30 minutes, PyTorch's default collective timeout: far beyond a healthy step.
  double step_timeout_s = 1800;
  // A collective that has not completed after this long makes its rank
  // report a hang naming the collective, its group and size; 0 = never.
  // 10 minutes, PyTorch's default for NCCL process groups: below
  // step_timeout, so a hung collective is reported with what it waits on.
  double collective_timeout_s = 600;
  // Without training.elasticity: how long a job whose host stopped
  // answering waits for it before it fails. 5 minutes: a reboot, not an
  // outage.
  double host_wait_timeout_s = 300;
};

enum class FaultKind {
  kExit,
  kAbort,
  kHang,
  kStallStep,
  kSlow,
  kStallCollective,
  kNanGradient,  // the rank's gradients of the step become NaN: "one rank overflows"
};

// testing.fault: a failure injected on purpose, to rehearse recovery. It
// strikes rank `rank` as step `step` begins, in attempt `attempt` only, so
// the restarted job runs clean.
struct FaultSpec {
  FaultKind kind = FaultKind::kExit;
  int rank = 0;  // checked against the world size by the plan
  int64_t step = 1;
  int attempt = 0;
  double seconds = 0;  // kSlow: the delay before each step from `step` on
};

struct TestingSpec {
  std::optional<FaultSpec> fault;
};

enum class JobKind { kTrain, kCommbench };

// `kind: commbench`: timed collectives on the job's process groups, checked
// and reported with nccl-tests' bandwidth definitions, to test a cluster
// before training on it.
struct CommbenchSpec {
  std::vector<std::string> collectives = {"all_reduce", "all_gather", "reduce_scatter",
                                          "all_to_all"};
  std::vector<std::string> groups = {"world"};  // world, data, model, pipe
  int64_t min_bytes = 1024;
  int64_t max_bytes = 16 << 20;
  int iterations = 20;
  int warmup = 5;
};

struct JobSpec {
  JobKind kind = JobKind::kTrain;
  std::string name;
  // The spec document after command-line overrides and the DeepSpeed config
  // merge: what the controller stores and hands to every rank, which parses
  // it into this same struct.
  std::string resolved_yaml;
  std::string spec_path;         // as given on the command line
  std::string deepspeed_config;  // resolved path, "" = none
  ClusterSpec cluster;
  ParallelismSpec parallelism;
  ModelSpec model;
  DataSpec data;
  TrainingSpec training;
  CheckpointSpec checkpoint;
  FaultToleranceSpec fault_tolerance;
  CommbenchSpec commbench;
  TestingSpec testing;
  std::map<std::string, std::string> env;
};

}  // namespace dslaunch::spec
