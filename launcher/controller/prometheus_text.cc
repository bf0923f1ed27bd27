#include "launcher/controller/prometheus_text.h"

#include <fmt/format.h>

namespace dslaunch::controller {
namespace {

// A label value with \, " and newlines escaped, as the format requires.
std::string escaped(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Exposition {
 public:
  // Declares a metric family once, then adds samples to it.
  void family(const char* name, const char* type, const char* help) {
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const char* name, const std::string& labels, double value) {
    text_ += fmt::format("{}{{{}}} {}\n", name, labels, value);
  }
  std::string text() && { return std::move(text_); }

 private:
  std::string text_;
};

}  // namespace

std::string prometheus_text(const v1::JobStatus& status, const nlohmann::json& last_step) {
  Exposition out;
  const std::string job =
      fmt::format("job=\"{}\",name=\"{}\"", escaped(status.job_id()), escaped(status.name()));
  out.family("dslaunch_job_info", "gauge", "The job's state, as a label (always 1).");
  out.sample("dslaunch_job_info", job + fmt::format(",state=\"{}\"", escaped(status.state())), 1);
  out.family("dslaunch_job_step", "gauge", "Optimizer steps the job has completed.");
  out.sample("dslaunch_job_step", job, static_cast<double>(status.step()));
  out.family("dslaunch_job_total_steps", "gauge", "Optimizer steps the job runs in all.");
  out.sample("dslaunch_job_total_steps", job, static_cast<double>(status.total_steps()));
  out.family("dslaunch_job_restarts_total", "counter", "Restarts of the job in this run.");
  out.sample("dslaunch_job_restarts_total", job, status.restarts());
  out.family("dslaunch_job_last_checkpoint_step", "gauge", "The newest committed checkpoint.");
  out.sample("dslaunch_job_last_checkpoint_step", job,
             static_cast<double>(status.last_checkpoint_step()));
  out.family("dslaunch_job_world_size", "gauge", "Ranks in the job.");
  out.sample("dslaunch_job_world_size", job, status.world_size());

  struct StepMetric {
    const char* key;
    const char* name;
    const char* help;
  };
  static const StepMetric kMetrics[] = {
      {"loss", "dslaunch_job_loss", "Rank 0's last training loss."},
      {"eval_loss", "dslaunch_job_eval_loss", "The last evaluation loss."},
      {"lr", "dslaunch_job_learning_rate", "The last step's learning rate."},
      {"tokens_per_s", "dslaunch_job_tokens_per_second", "The job's tokens per second."},
      {"tflops", "dslaunch_job_tflops", "The job's achieved TFLOP/s (matrix products)."},
      {"step_time_s", "dslaunch_job_step_time_seconds", "Rank 0's last step time."},
  };
  for (const StepMetric& metric : kMetrics) {
    if (!last_step.is_object() || !last_step.contains(metric.key)) continue;
    out.family(metric.name, "gauge", metric.help);
    out.sample(metric.name, job, last_step[metric.key].get<double>());
  }

  struct RankMetric {
    const char* name;
    const char* help;
    double (*value)(const v1::RankStatus&);
  };
  static const RankMetric kRankMetrics[] = {
      {"dslaunch_rank_up", "1 while the rank runs, else 0.",
       [](const v1::RankStatus& r) { return r.state() == "running" ? 1.0 : 0.0; }},
      {"dslaunch_rank_step", "The last step the rank reported.",
       [](const v1::RankStatus& r) { return static_cast<double>(r.step()); }},
      {"dslaunch_rank_heartbeat_age_seconds", "Seconds since the rank's last heartbeat.",
       [](const v1::RankStatus& r) { return r.heartbeat_age_ms() / 1000.0; }},
      {"dslaunch_rank_step_time_seconds", "The rank's last step time.",
       [](const v1::RankStatus& r) { return r.step_time_s(); }},
      {"dslaunch_rank_resident_memory_bytes", "The rank's resident memory now.",
       [](const v1::RankStatus& r) { return static_cast<double>(r.memory().rss_bytes()); }},
      {"dslaunch_rank_peak_resident_memory_bytes", "The rank's largest resident memory.",
       [](const v1::RankStatus& r) { return static_cast<double>(r.memory().peak_rss_bytes()); }},
      {"dslaunch_rank_model_state_bytes",
       "Parameters, gradients and optimizer states the rank holds.",
       [](const v1::RankStatus& r) {
         const v1::MemoryUsage& m = r.memory();
         return static_cast<double>(m.parameters() + m.gradients() + m.optimizer_states());
       }},
  };
  for (const RankMetric& metric : kRankMetrics) {
    out.family(metric.name, "gauge", metric.help);
    for (const v1::RankStatus& rank : status.ranks()) {
      out.sample(metric.name,
                 fmt::format("job=\"{}\",rank=\"{}\",host=\"{}\"", escaped(status.job_id()),
                             rank.rank(), escaped(rank.host())),
                 metric.value(rank));
    }
  }
  return std::move(out).text();
}

}  // namespace dslaunch::controller
