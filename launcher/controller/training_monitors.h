#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/monitor/csv_monitor.h"
#include "core/monitor/tensorboard_writer.h"
#include "core/spec/job_spec.h"
#include "core/status.h"

namespace dslaunch::controller {

// DeepSpeed's `tensorboard` and `csv_monitor`, written by the controller
// from rank 0's step metrics (metrics.jsonl's lines), as DeepSpeed writes
// them from rank 0: the series Train/Samples/train_loss, lr, loss_scale
// (fp16), eval_loss, grad_norm, tokens_per_s, tflops and step_time_s over
// the samples consumed (DeepSpeed's x axis), in
// <output_path>/<job_name>/. One per `dslaunch run` or `resume`: a resumed
// job adds a TensorBoard event file beside the earlier ones and appends to
// its CSV files. Not thread-safe.
class TrainingMonitors {
 public:
  // Opens what `spec` enables; `job_dir` and `job_name` give the defaults
  // of output_path (<job_dir>/tensorboard, <job_dir>/csv_monitor) and
  // job_name. Fails, naming the folder, when the event file cannot be made.
  static core::StatusOr<TrainingMonitors> create(const spec::MonitorSpec& spec,
                                                 const std::string& job_dir,
                                                 const std::string& job_name);

  bool enabled() const { return tensorboard_.has_value() || csv_.has_value(); }

  // Records one step line of rank 0 (with "step", "samples" and the
  // metrics); lines of other ranks and "what" lines are not for it.
  core::Status on_step(const nlohmann::json& line);

 private:
  std::optional<core::TensorBoardWriter> tensorboard_;
  std::optional<core::CsvMonitor> csv_;
};

}  // namespace dslaunch::controller
