#include "launcher/controller/job_status.h"

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

namespace dslaunch::controller {
namespace {

// The field's value when it has T's type and range, else `fallback`:
// state.json is read back from disk, where anything may have been written.
template <typename T>
T get_or(const nlohmann::json& json, const char* key, T fallback) {
  const auto it = json.find(key);
  if (it == json.end()) return fallback;
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) return fallback;
    if (it->is_number_unsigned()) {
      const uint64_t value = it->get<uint64_t>();
      return value <= static_cast<uint64_t>(std::numeric_limits<T>::max()) ? static_cast<T>(value)
                                                                           : fallback;
    }
    const int64_t value = it->get<int64_t>();
    return std::in_range<T>(value) ? static_cast<T>(value) : fallback;
  } else if constexpr (std::is_floating_point_v<T>) {
    return it->is_number() ? it->get<T>() : fallback;
  } else {
    return it->is_string() ? it->get<T>() : fallback;
  }
}

nlohmann::json memory_json(const v1::MemoryUsage& memory) {
  return {{"parameters", memory.parameters()},
          {"gradients", memory.gradients()},
          {"optimizer_states", memory.optimizer_states()},
          {"activations", memory.activations()},
          {"communication_buffers", memory.communication_buffers()},
          {"gradient_workspace_peak", memory.gradient_workspace_peak()},
          {"parameter_workspace_peak", memory.parameter_workspace_peak()},
          {"weight_copy", memory.weight_copy()},
          {"rss_bytes", memory.rss_bytes()},
          {"peak_rss_bytes", memory.peak_rss_bytes()},
          {"peak_device_bytes", memory.peak_device_bytes()}};
}

void memory_from_json(const nlohmann::json& json, v1::MemoryUsage* memory) {
  memory->set_parameters(get_or<int64_t>(json, "parameters", 0));
  memory->set_gradients(get_or<int64_t>(json, "gradients", 0));
  memory->set_optimizer_states(get_or<int64_t>(json, "optimizer_states", 0));
  memory->set_activations(get_or<int64_t>(json, "activations", 0));
  memory->set_communication_buffers(get_or<int64_t>(json, "communication_buffers", 0));
  memory->set_gradient_workspace_peak(get_or<int64_t>(json, "gradient_workspace_peak", 0));
  memory->set_parameter_workspace_peak(get_or<int64_t>(json, "parameter_workspace_peak", 0));
  memory->set_weight_copy(get_or<int64_t>(json, "weight_copy", 0));
  memory->set_rss_bytes(get_or<int64_t>(json, "rss_bytes", 0));
  memory->set_peak_rss_bytes(get_or<int64_t>(json, "peak_rss_bytes", 0));
  memory->set_peak_device_bytes(get_or<int64_t>(json, "peak_device_bytes", 0));
}

}  // namespace

v1::JobStatus make_job_status(const JobInfo& info, const JobState& state, const Clock& clock,
                              int attempt, int restarts, int64_t now_unix_ms) {
  v1::JobStatus status;
  status.set_job_id(info.job_id);
  status.set_name(info.name);
  status.set_kind(info.kind);
  status.set_world_size(info.world_size);
  status.set_controller_address(info.controller_address);
  status.set_tls_ca(info.tls_ca);
  status.set_started_unix_ms(info.started_unix_ms);
  status.set_controller_pid(info.controller_pid);
  status.set_controller_host(info.controller_host);
  status.set_updated_unix_ms(now_unix_ms);
  status.set_attempt(attempt);
  status.set_restarts(restarts);
  status.set_state(to_string(state.phase()));
  status.set_total_steps(info.total_steps);
  const v1::Heartbeat latest = state.latest_heartbeat();
  status.set_step(latest.step());
  status.set_loss(latest.loss());
  status.set_tokens_per_s(latest.tokens_per_s());
  if (const auto cause = state.root_cause()) status.set_reason(cause->to_string());
  const auto now = clock.now();
  for (const RankRecord& record : state.ranks()) {
    v1::RankStatus* rank = status.add_ranks();
    rank->set_rank(record.rank);
    rank->set_host(record.host);
    rank->set_pid(record.pid);
    rank->set_device(record.device);
    rank->set_state(to_string(record.phase));
    rank->set_heartbeat_age_ms(
        record.pid == 0
            ? -1
            : std::chrono::duration_cast<std::chrono::milliseconds>(now - record.last_heartbeat)
                  .count());
    rank->set_step(record.heartbeat.step());
    if (record.rank >= 0 && record.rank < static_cast<int>(info.stage_of_rank.size())) {
      rank->set_stage(info.stage_of_rank[record.rank]);
    }
    rank->set_step_time_s(record.heartbeat.step_time_s());
    rank->set_pipeline_wait_s(record.heartbeat.pipeline_wait_s());
    rank->set_comm_bytes(record.heartbeat.comm_bytes());
    rank->set_compression_ratio(record.heartbeat.compression_ratio());
    *rank->mutable_memory() = record.heartbeat.memory();
    if (record.exit_code) rank->set_exit_code(*record.exit_code);
    if (record.exit_signal) rank->set_exit_signal(*record.exit_signal);
  }
  return status;
}

nlohmann::json status_to_json(const v1::JobStatus& status) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const v1::RankStatus& rank : status.ranks()) {
    nlohmann::json entry = {{"rank", rank.rank()},
                            {"host", rank.host()},
                            {"pid", rank.pid()},
                            {"device", rank.device()},
                            {"state", rank.state()},
                            {"heartbeat_age_ms", rank.heartbeat_age_ms()},
                            {"step", rank.step()},
                            {"memory", memory_json(rank.memory())},
                            {"stage", rank.stage()},
                            {"step_time_s", rank.step_time_s()},
                            {"pipeline_wait_s", rank.pipeline_wait_s()},
                            {"comm_bytes", rank.comm_bytes()},
                            {"compression_ratio", rank.compression_ratio()},
                            {"exit_code", nullptr},
                            {"exit_signal", nullptr}};
    if (rank.has_exit_code()) entry["exit_code"] = rank.exit_code();
    if (rank.has_exit_signal()) entry["exit_signal"] = rank.exit_signal();
    ranks.push_back(entry);
  }
  nlohmann::json attempts = nlohmann::json::array();
  for (const v1::AttemptSummary& attempt : status.attempts()) {
    attempts.push_back({{"attempt", attempt.attempt()},
                        {"state", attempt.state()},
                        {"reason", attempt.reason()},
                        {"resumed_from_step", attempt.resumed_from_step()},
                        {"last_step", attempt.last_step()},
                        {"started_unix_ms", attempt.started_unix_ms()}});
  }
  return {{"job_id", status.job_id()},
          {"name", status.name()},
          {"kind", status.kind()},
          {"state", status.state()},
          {"attempt", status.attempt()},
          {"restarts", status.restarts()},
          {"world_size", status.world_size()},
          {"step", status.step()},
          {"total_steps", status.total_steps()},
          {"loss", status.loss()},
          {"tokens_per_s", status.tokens_per_s()},
          {"last_checkpoint_step", status.last_checkpoint_step()},
          {"reason", status.reason()},
          {"controller_address", status.controller_address()},
          {"tls_ca", status.tls_ca()},
          {"controller_pid", status.controller_pid()},
          {"controller_host", status.controller_host()},
          {"started_unix_ms", status.started_unix_ms()},
          {"updated_unix_ms", status.updated_unix_ms()},
          {"ranks", ranks},
          {"attempts", attempts}};
}

v1::JobStatus status_from_json(const nlohmann::json& json) {
  v1::JobStatus status;
  status.set_job_id(get_or<std::string>(json, "job_id", ""));
  status.set_name(get_or<std::string>(json, "name", ""));
  status.set_kind(get_or<std::string>(json, "kind", ""));
  status.set_state(get_or<std::string>(json, "state", ""));
  status.set_attempt(get_or<int>(json, "attempt", 0));
  status.set_restarts(get_or<int>(json, "restarts", 0));
  status.set_world_size(get_or<int>(json, "world_size", 0));
  status.set_step(get_or<int64_t>(json, "step", 0));
  status.set_total_steps(get_or<int64_t>(json, "total_steps", 0));
  status.set_loss(get_or<double>(json, "loss", 0));
  status.set_tokens_per_s(get_or<double>(json, "tokens_per_s", 0));
  status.set_last_checkpoint_step(get_or<int64_t>(json, "last_checkpoint_step", 0));
  status.set_reason(get_or<std::string>(json, "reason", ""));
  status.set_controller_address(get_or<std::string>(json, "controller_address", ""));
  status.set_tls_ca(get_or<std::string>(json, "tls_ca", ""));
  status.set_started_unix_ms(get_or<int64_t>(json, "started_unix_ms", 0));
  status.set_controller_pid(get_or<int>(json, "controller_pid", 0));
  status.set_controller_host(get_or<std::string>(json, "controller_host", ""));
  status.set_updated_unix_ms(get_or<int64_t>(json, "updated_unix_ms", 0));
  if (const auto attempts = json.find("attempts"); attempts != json.end() && attempts->is_array()) {
    for (const nlohmann::json& entry : *attempts) {
      v1::AttemptSummary* attempt = status.add_attempts();
      attempt->set_attempt(get_or<int>(entry, "attempt", 0));
      attempt->set_state(get_or<std::string>(entry, "state", ""));
      attempt->set_reason(get_or<std::string>(entry, "reason", ""));
      attempt->set_resumed_from_step(get_or<int64_t>(entry, "resumed_from_step", 0));
      attempt->set_last_step(get_or<int64_t>(entry, "last_step", 0));
      attempt->set_started_unix_ms(get_or<int64_t>(entry, "started_unix_ms", 0));
    }
  }
  const auto ranks = json.find("ranks");
  if (ranks == json.end() || !ranks->is_array()) return status;
  for (const nlohmann::json& entry : *ranks) {
    v1::RankStatus* rank = status.add_ranks();
    rank->set_rank(get_or<int>(entry, "rank", 0));
    rank->set_host(get_or<std::string>(entry, "host", ""));
    rank->set_pid(get_or<int64_t>(entry, "pid", 0));
    rank->set_device(get_or<std::string>(entry, "device", ""));
    rank->set_state(get_or<std::string>(entry, "state", ""));
    rank->set_heartbeat_age_ms(get_or<int64_t>(entry, "heartbeat_age_ms", -1));
    rank->set_step(get_or<int64_t>(entry, "step", 0));
    rank->set_stage(get_or<int>(entry, "stage", 0));
    rank->set_step_time_s(get_or<double>(entry, "step_time_s", 0));
    rank->set_pipeline_wait_s(get_or<double>(entry, "pipeline_wait_s", 0));
    rank->set_comm_bytes(get_or<int64_t>(entry, "comm_bytes", 0));
    rank->set_compression_ratio(get_or<double>(entry, "compression_ratio", 0));
    if (const auto memory = entry.find("memory"); memory != entry.end()) {
      memory_from_json(*memory, rank->mutable_memory());
    }
    if (const auto code = get_or<int>(entry, "exit_code", -1000); code != -1000) {
      rank->set_exit_code(code);
    }
    if (const auto signal = get_or<int>(entry, "exit_signal", -1000); signal != -1000) {
      rank->set_exit_signal(signal);
    }
  }
  return status;
}

}  // namespace dslaunch::controller
