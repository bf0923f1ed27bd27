#include "launcher/controller/training_monitors.h"

#include <chrono>
#include <filesystem>

namespace dslaunch::controller {
namespace {

std::string folder_of(const spec::MonitorOutput& output, const std::string& job_dir,
                      const char* default_folder, const std::string& job_name) {
  const std::filesystem::path root = output.output_path.empty()
                                         ? std::filesystem::path(job_dir) / default_folder
                                         : std::filesystem::path(output.output_path);
  return (root / (output.job_name.empty() ? job_name : output.job_name)).string();
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

core::StatusOr<TrainingMonitors> TrainingMonitors::create(const spec::MonitorSpec& spec,
                                                          const std::string& job_dir,
                                                          const std::string& job_name) {
  TrainingMonitors monitors;
  if (spec.tensorboard.enabled) {
    core::StatusOr<core::TensorBoardWriter> writer = core::TensorBoardWriter::create(
        folder_of(spec.tensorboard, job_dir, "tensorboard", job_name), now_seconds());
    if (!writer.ok()) return writer.status().with_context("tensorboard");
    monitors.tensorboard_.emplace(std::move(*writer));
  }
  if (spec.csv_monitor.enabled) {
    monitors.csv_.emplace(folder_of(spec.csv_monitor, job_dir, "csv_monitor", job_name));
  }
  return monitors;
}

core::Status TrainingMonitors::on_step(const nlohmann::json& line) {
  if (!enabled() || line.contains("what") || line.value("rank", -1) != 0) return {};
  const int64_t x =
      line.contains("samples") ? line["samples"].get<int64_t>() : line.value("step", int64_t{0});
  // DeepSpeed's names for its own three, then the rest under the same root.
  static const std::pair<const char*, const char*> kSeries[] = {
      {"loss", "Train/Samples/train_loss"},       {"lr", "Train/Samples/lr"},
      {"loss_scale", "Train/Samples/loss_scale"}, {"eval_loss", "Train/Samples/eval_loss"},
      {"grad_norm", "Train/Samples/grad_norm"},   {"tokens_per_s", "Train/Samples/tokens_per_s"},
      {"tflops", "Train/Samples/tflops"},         {"step_time_s", "Train/Samples/step_time_s"},
  };
  const double wall_time = now_seconds();
  for (const auto& [key, tag] : kSeries) {
    if (!line.contains(key) || !line[key].is_number()) continue;
    const double value = line[key].get<double>();
    // A skipped fp16 step has no gradient norm (-1 in the metrics).
    if (std::string_view(key) == "grad_norm" && value < 0) continue;
    if (tensorboard_) {
      if (core::Status status =
              tensorboard_->add_scalar(tag, x, static_cast<float>(value), wall_time);
          !status.ok()) {
        return status;
      }
    }
    if (csv_) {
      if (core::Status status = csv_->add(tag, x, value); !status.ok()) return status;
    }
  }
  return tensorboard_ ? tensorboard_->flush() : core::Status();
}

}  // namespace dslaunch::controller
