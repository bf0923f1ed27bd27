#include "worker/train_workload.h"

#include <atomic>
#include <exception>
#include <filesystem>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/file_system.h"
#include "core/spec/training_support.h"
#include "core/weights/hf_gpt2.h"
#include "kernels/backend.h"
#include "kernels/make_backend.h"
#include "worker/checkpoint/async_shard_writer.h"
#include "worker/comm/comms_summary.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/data/demo_corpus.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker {
namespace {

namespace v1 = dslaunch::v1;

void report_error(proto::Session& session, const std::string& message) {
  v1::WorkerMessage out;
  out.mutable_event()->set_kind(v1::WorkerEvent::KIND_ERROR);
  out.mutable_event()->set_message(message);
  session.send(out);
  spdlog::error("{}", message);
}

void send_step_metrics(proto::Session& session, const engine::StepReport& report) {
  v1::WorkerMessage message;
  v1::WorkerEvent* event = message.mutable_event();
  event->set_kind(v1::WorkerEvent::KIND_STEP_METRICS);
  event->set_step(report.step);
  auto& metrics = *event->mutable_metrics();
  metrics["samples"] = static_cast<double>(report.samples);
  metrics["loss"] = report.loss;
  metrics["lr"] = report.lr;
  metrics["grad_norm"] = report.grad_norm;
  metrics["step_time_s"] = report.step_seconds;
  metrics["tokens_per_s"] = report.tokens_per_second;
  metrics["tflops"] = report.tflops;
  if (report.eval_loss) metrics["eval_loss"] = *report.eval_loss;
  if (report.loss_scale) {
    metrics["loss_scale"] = *report.loss_scale;
    metrics["skipped"] = report.skipped ? 1 : 0;
    metrics["skipped_steps"] = static_cast<double>(report.skipped_steps);
  }
  metrics["forward_s"] = report.forward_seconds;
  metrics["backward_s"] = report.backward_seconds;
  metrics["gradient_wait_s"] = report.gradient_wait_seconds;
  metrics["optimizer_s"] = report.optimizer_seconds;
  if (report.tensor_comm_seconds > 0) metrics["tensor_comm_s"] = report.tensor_comm_seconds;
  metrics["comm_bytes"] = static_cast<double>(report.comm_bytes);
  metrics["data_comm_bytes"] = static_cast<double>(report.data_comm_bytes);
  if (report.compression_ratio) metrics["compression_ratio"] = *report.compression_ratio;
  for (size_t stage = 0; stage < report.stage_wait_seconds.size(); ++stage) {
    metrics[fmt::format("stage{}_wait_s", stage)] = report.stage_wait_seconds[stage];
  }
  session.send(message);
}

// Every rank's memory by kind, once after the first step: a metrics.jsonl
// line with "what": "memory" and step 0.
void send_memory_metrics(proto::Session& session, const engine::MemoryReport& memory) {
  v1::WorkerMessage message;
  v1::WorkerEvent* event = message.mutable_event();
  event->set_kind(v1::WorkerEvent::KIND_STEP_METRICS);
  event->set_step(0);
  event->set_message("memory");
  auto& metrics = *event->mutable_metrics();
  metrics["parameters_bytes"] = static_cast<double>(memory.parameters);
  metrics["gradients_bytes"] = static_cast<double>(memory.gradients);
  metrics["optimizer_states_bytes"] = static_cast<double>(memory.optimizer_states);
  metrics["activations_bytes"] = static_cast<double>(memory.activations);
  metrics["communication_buffers_bytes"] = static_cast<double>(memory.communication_buffers);
  metrics["gradient_workspace_peak_bytes"] = static_cast<double>(memory.gradient_workspace_peak);
  metrics["parameter_workspace_peak_bytes"] = static_cast<double>(memory.parameter_workspace_peak);
  metrics["weight_copy_bytes"] = static_cast<double>(memory.weight_copy);
  metrics["peak_device_bytes"] = static_cast<double>(memory.device_peak);
  session.send(message);
}

// A shard is durable: tell the controller what it holds, so it can write the
// manifest once every rank's is.
// False when the session did not take it (full, or closing): the controller
// would never commit the step.
bool send_checkpoint_written(proto::Session& session, const engine::CheckpointSlice& slice,
                             const std::string& file, const core::WrittenShard& written) {
  v1::WorkerMessage message;
  v1::WorkerEvent* event = message.mutable_event();
  event->set_kind(v1::WorkerEvent::KIND_CHECKPOINT_WRITTEN);
  event->set_step(slice.step);
  v1::CheckpointShard* shard = event->add_shards();
  shard->set_path(file);
  shard->set_size_bytes(written.size_bytes);
  shard->set_xxh64(written.xxh64);
  shard->set_begin(slice.begin);
  shard->set_end(slice.end);
  shard->set_total_parameters(slice.total_parameters);
  shard->set_model_parameters(slice.model_parameters);
  shard->set_tensor_rank(slice.tensor_rank);
  shard->set_stage(slice.stage);
  return session.send(message);
}

// Reports a failed checkpoint once: the first failure is this rank's error.
void report_checkpoint_failure(proto::Session& session, std::atomic<bool>& failed, int64_t step,
                               const std::string& why) {
  if (!failed.exchange(true)) {
    report_error(session, fmt::format("checkpoint of step {}: {}", step, why));
  }
}

// Hands this rank's slice to the background writer, as
// <root>/step_<8 digits>/rank_<world rank>.bin, to be written from the model
// state itself when `in_place` and the slice allows it; the controller hears
// of the shard once it is durable, or of the error.
void save_in_background(checkpoint::AsyncShardWriter& writer, proto::Session& session,
                        const std::string& root, const comm::ProcessGroups& groups,
                        const engine::CheckpointSlice& slice, bool in_place,
                        std::atomic<bool>& failed) {
  const std::filesystem::path folder =
      std::filesystem::path(root) / fmt::format("step_{:08d}", slice.step);
  const std::string file = fmt::format("rank_{}.bin", groups.rank());
  // Private to the user, as the job directory is (0700).
  if (std::string error;
      !core::create_folders(core::default_file_system(), folder.string(), 0700, error)) {
    report_checkpoint_failure(session, failed, slice.step, error);
    return;
  }
  const core::ShardHeader header =
      engine::shard_header(slice, groups.rank(), groups.world().size());
  // The callback runs on the writer's thread, after `slice`'s pointers are
  // gone (on this thread, before save() returns, for a shard that streams
  // swapped state): it uses only the slice's numbers.
  writer.save((folder / file).string(), header, slice.arrays, slice.rank_arrays,
              [&session, &failed, slice, file](const core::WrittenShard& written) {
                if (!written.ok()) {
                  report_checkpoint_failure(session, failed, slice.step, written.error);
                } else if (!send_checkpoint_written(session, slice, file, written)) {
                  report_checkpoint_failure(
                      session, failed, slice.step,
                      "its report to the controller was not sent (session full or closing)");
                }
              },
              slice.in_place && in_place ? checkpoint::AsyncShardWriter::Hold::kBorrow
                                         : checkpoint::AsyncShardWriter::Hold::kCopy);
}

std::string format_step(const engine::StepReport& r, int64_t total_steps,
                        bool wall_clock_breakdown) {
  std::string line = fmt::format(
      "step {:>{}}/{} | loss {:.4f} | lr {:.3e} | grad_norm {:.3f} | {:.0f} tokens/s | {:.3f} "
      "TFLOP/s",
      r.step, fmt::format("{}", total_steps).size(), total_steps, r.loss, r.lr, r.grad_norm,
      r.tokens_per_second, r.tflops);
  if (r.loss_scale) {
    line += fmt::format(" | loss_scale {:g}{}", *r.loss_scale,
                        r.skipped ? " (gradients overflowed: step skipped)" : "");
  }
  if (r.eval_loss) line += fmt::format(" | eval_loss {:.4f}", *r.eval_loss);
  if (wall_clock_breakdown) {
    line += fmt::format(
        " | forward {:.1f} ms | backward {:.1f} ms | gradient wait {:.1f} ms | optimizer {:.1f} ms",
        r.forward_seconds * 1e3, r.backward_seconds * 1e3, r.gradient_wait_seconds * 1e3,
        r.optimizer_seconds * 1e3);
  }
  return line;
}

}  // namespace

int run_train_workload(const TrainWorkloadContext& context) {
  const spec::JobSpec& spec = *context.spec;
  proto::Session& session = *context.session;
  if (std::string problem = spec::training_support_problem(spec); !problem.empty()) {
    report_error(session, problem);
    return 1;
  }
  const data::TrainingData data =
      data::open_training_data(spec.data, spec.model.seq_length, data::default_demo_dir());
  if (!data.error.empty()) {
    report_error(session, "data: " + data.error);
    return 1;
  }
  const bool reporter = context.groups->rank() == 0;
  if (reporter) {
    spdlog::info("data: train {} tokens{}, evaluation {} tokens{}", data.train_tokens(),
                 data.train.size() > 1 ? fmt::format(" in {} blended datasets", data.train.size())
                                       : "",
                 data.valid.size(),
                 data.unigram_entropy_nats
                     ? fmt::format(" (demo corpus; unigram entropy {:.3f} nats)",
                                   *data.unigram_entropy_nats)
                     : "");
  }

  core::StatusOr<std::unique_ptr<kernels::Backend>> made_backend =
      kernels::make_backend(spec.cluster.device == spec::Device::kCuda ? kernels::DeviceKind::kCuda
                                                                       : kernels::DeviceKind::kCpu,
                            context.compute_threads, context.gpu);
  if (!made_backend.ok()) {
    report_error(session, made_backend.status().message());
    return 1;
  }
  kernels::Backend& backend = **made_backend;
  // On a GPU with offload_optimizer the model states stay in host memory,
  // with their own CPU backend (engine::TrainerOptions::host_backend).
  std::unique_ptr<kernels::Backend> host_backend;
  if (!backend.memory_is_host() &&
      spec.training.zero.offload_optimizer.device != spec::OffloadDevice::kNone) {
    host_backend = kernels::make_cpu_backend(context.compute_threads);
  }
  if (reporter && (spec.training.bf16 || spec.training.fp16.enabled)) {
    // Which kernel runs this precision's products here (the trainer sets it
    // for the run).
    const core::DType precision = spec.training.bf16 ? core::DType::kBF16 : core::DType::kF16;
    backend.set_matmul_precision(precision);
    spdlog::info("precision: {} with fp32 master weights; matrix products on {}",
                 core::dtype_name(precision), backend.matmul_kernel());
    backend.set_matmul_precision(core::DType::kF32);
  }
  engine::TrainerOptions options;
  options.data_comm = &context.groups->data();
  options.host_backend = host_backend.get();
  // A GPU's data group averages its gradients through NCCL.
  if (!backend.memory_is_host() && comm::nccl_built()) {
    options.device_communicator = [](comm::Communicator& data) {
      return comm::make_nccl_communicator(data);
    };
  }
  options.tensor_comm = &context.groups->tensor();
  options.pipeline_comm = &context.groups->pipeline();
  options.batch = context.batch;
  options.stop_requested = context.stop_requested;
  options.on_step_started = context.on_step_started;
  options.poison_gradients = context.poison_gradients;
  options.on_memory = [&](const engine::MemoryReport& memory) {
    if (context.on_memory) context.on_memory(memory);
    send_memory_metrics(session, memory);
  };
  options.on_step = [&](const engine::StepReport& report) {
    if (context.on_step_done) context.on_step_done(report);
    if (!reporter) return;
    const spec::MonitorSpec& monitor = spec.training.monitor;
    if (report.step % monitor.steps_per_print == 0 || report.eval_loss ||
        report.step == spec.training.steps) {
      spdlog::info("{}", format_step(report, spec.training.steps, monitor.wall_clock_breakdown));
    }
    send_step_metrics(session, report);
  };
  options.on_notice = [&](const std::string& notice) {
    if (reporter) spdlog::info("notice: {}", notice);
  };
  options.transport = &context.groups->transport();
  options.resume = context.resume;
  options.checkpoint_requested = context.checkpoint_requested;
  // Shards are written by the writer's thread while training goes on: from
  // the model state itself where it is in memory (the next optimizer step
  // waits for the write if it is not done by then), else from a copy; a
  // failed write is this rank's error.
  std::atomic<bool> checkpoint_failed{false};  // outlives the writer, whose thread sets it
  checkpoint::AsyncShardWriter writer;
  if (!context.checkpoint_directory.empty()) {
    options.save_checkpoint = [&](const engine::CheckpointSlice& slice) {
      save_in_background(writer, session, context.checkpoint_directory, *context.groups, slice,
                         spec.checkpoint.write_in_place, checkpoint_failed);
    };
    options.before_update = [&writer] { writer.release(); };
  }
  // The final weights, which rank 0 writes once the final checkpoint is
  // durable (a failed checkpoint leaves them unwritten, and fails the rank
  // below): at ZeRO stage 3 a range at a time from the partitions, so the
  // export never holds them whole. Every rank makes the same reads whatever
  // fails here, since over several ranks they are collective.
  const std::string weights_path =
      (std::filesystem::path(context.job_directory) / "weights" / "model.safetensors").string();
  options.write_final_weights = [&](const core::ParameterReader& read) -> core::Status {
    if (context.on_writing_checkpoint) context.on_writing_checkpoint();
    writer.wait();
    const core::ParameterTable table(core::model_config(spec.model, 1));
    std::string error;
    const bool writes = reporter && !checkpoint_failed.load() &&
                        core::create_folders(core::default_file_system(),
                                             core::parent_folder(weights_path), 0700, error);
    if (!writes) {
      const std::string read_error = core::read_hf_gpt2_sources(table, read);
      if (!error.empty()) {
        return core::Status(core::StatusCode::kIoError, "writing the final weights: " + error);
      }
      if (!read_error.empty()) {
        return core::Status(core::StatusCode::kUnavailable,
                            "exporting the final weights: " + read_error);
      }
      return {};
    }
    if (!core::write_hf_gpt2(weights_path, table, read, error)) {
      return core::Status(core::StatusCode::kIoError, "writing the final weights: " + error);
    }
    return {};
  };
  engine::TrainResult result;
  try {
    result = engine::train(spec, data, backend, options);
  } catch (const std::exception& error) {
    // Out of memory, or a broken invariant: report it as this rank's error
    // instead of dying with no word to the controller.
    result.error = fmt::format("training stopped by an internal error: {}", error.what());
  }
  if (!result.error.empty()) {
    report_error(session, result.error);
    return 1;
  }
  if (reporter && spec.training.monitor.comms_logger) {
    // One log line per table row, so each carries the time and the rank.
    spdlog::info("comms_logger: rank 0's collectives");
    std::istringstream table(comm::comms_summary(context.groups->transport().stats_by_axis()));
    for (std::string row; std::getline(table, row);) spdlog::info("{}", row);
  }
  if (context.on_writing_checkpoint) context.on_writing_checkpoint();
  writer.wait();
  if (checkpoint_failed.load()) return 1;
  if (reporter && result.steps > 0) spdlog::info("weights after step {}: {}", result.steps, weights_path);
  if (result.stopped) {
    v1::WorkerMessage stopped;
    stopped.mutable_event()->set_kind(v1::WorkerEvent::KIND_STOPPED);
    stopped.mutable_event()->set_step(result.steps);
    if (context.stop_reason) stopped.mutable_event()->set_message(context.stop_reason());
    session.send(stopped);
  }
  return 0;
}

}  // namespace dslaunch::worker
