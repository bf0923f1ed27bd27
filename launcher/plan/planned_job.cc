#include "launcher/plan/planned_job.h"

#include <cstdlib>

#include <fmt/format.h>

#include "core/layout/model_config.h"
#include "core/weights/initial_weights.h"
#include "launcher/plan/local_machine.h"
#include "proto/message_limits.h"

namespace dslaunch::plan {

std::optional<PlannedJob> load_and_plan(const std::string& path, const spec::LoadOptions& options,
                                        spec::Diagnostics& diagnostics) {
  PlannedJob job;
  job.spec = spec::load_job_spec(path, options, diagnostics, job.locations);
  if (diagnostics.has_errors()) return std::nullopt;
  // Every rank receives the resolved spec in one controller message.
  if (job.spec.resolved_yaml.size() > proto::kMaxResolvedSpecBytes) {
    diagnostics.error(
        spec::Location{path, 0, 0, ""},
        fmt::format("the resolved job spec is {} bytes, more than the {} MiB the controller can "
                    "send its ranks; keep large data in files the spec names",
                    job.spec.resolved_yaml.size(), proto::kMaxResolvedSpecBytes >> 20));
    return std::nullopt;
  }
  // The weights to start from must fit the model before any rank starts.
  if (const std::string& weights = job.spec.training.init_from; !weights.empty()) {
    const core::Status fits = core::initial_weights_problem(
        weights, core::model_config(job.spec.model, job.spec.parallelism.tensor));
    if (!fits.ok()) {
      diagnostics.error(job.locations.find("training.init_from"), fits.message());
      return std::nullopt;
    }
  }
  const PlanInputs inputs{probe_local_machine(),
                          [](const char* name) { return std::getenv(name); }};
  std::optional<JobPlan> plan = make_plan(job.spec, job.locations, inputs, diagnostics);
  if (!plan) return std::nullopt;
  job.plan = std::move(*plan);
  // What auto chose is what the job runs on, and what its ranks read.
  if (job.spec.cluster.device == spec::Device::kAuto) {
    spec::set_planned_device(job.spec, job.plan.device);
  }
  const std::vector<std::string> spec_warnings = diagnostics.warnings();
  job.plan.warnings.insert(job.plan.warnings.begin(), spec_warnings.begin(), spec_warnings.end());
  return job;
}

}  // namespace dslaunch::plan
