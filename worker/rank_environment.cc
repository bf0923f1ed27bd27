#include "worker/rank_environment.h"

#include <string_view>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>

#include "topology/slurm_nodelist.h"

namespace dslaunch::worker {
namespace {

struct Names {
  const char* rank;
  const char* local_rank;
  const char* world_size;
  const char* local_world_size;
};

// In order of preference: the launcher's own variables first, since a rank
// may inherit stale torchrun-style ones from the shell.
constexpr Names kLaunchers[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", nullptr},
    {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"},
};

std::optional<int> number(const char* text) {
  if (text == nullptr) return std::nullopt;
  const std::string value(text);
  int parsed = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (ec != std::errc() || end != value.data() + value.size() || parsed < 0) return std::nullopt;
  return parsed;
}

// Under srun: this node's entry of the step's tasks per node.
std::optional<int> slurm_local_world_size(const std::function<const char*(const char*)>& getenv) {
  const char* per_node = getenv("SLURM_STEP_TASKS_PER_NODE");
  const auto node = number(getenv("SLURM_NODEID"));
  if (per_node == nullptr || !node) return std::nullopt;
  const topology::TasksPerNode counts = topology::expand_tasks_per_node(per_node);
  if (!counts.error.empty() || *node >= static_cast<int>(counts.counts.size())) {
    return std::nullopt;
  }
  return counts.counts[*node];
}

}  // namespace

std::optional<RankEnvironment> read_rank_environment(
    const std::function<const char*(const char*)>& getenv, std::string& error) {
  for (const Names& names : kLaunchers) {
    if (getenv(names.rank) == nullptr) continue;
    const auto rank = number(getenv(names.rank));
    const auto local_rank = number(getenv(names.local_rank));
    const auto world = number(getenv(names.world_size));
    const auto local_world = names.local_world_size != nullptr
                                 ? number(getenv(names.local_world_size))
                                 : slurm_local_world_size(getenv);
    if (!rank || !local_rank || !world || !local_world || *rank >= *world ||
        *local_rank >= *local_world) {
      error = std::string("the launcher's rank variables are incomplete or inconsistent (") +
              names.rank + ", " + names.local_rank + ", " + names.world_size + ", " +
              (names.local_world_size != nullptr ? names.local_world_size
                                                 : "SLURM_STEP_TASKS_PER_NODE with SLURM_NODEID") +
              ")";
      return std::nullopt;
    }
    return RankEnvironment{*rank, *local_rank, *world, *local_world};
  }
  error =
      "no rank variables (OMPI_COMM_WORLD_*, SLURM_*, or RANK/WORLD_SIZE): dsworker run is "
      "started by `dslaunch run` through mpirun or srun";
  return std::nullopt;
}

std::optional<int> planned_gpu(const std::string& device) {
  constexpr std::string_view kPrefix = "cuda:";
  if (device.rfind(kPrefix, 0) != 0 || device.size() == kPrefix.size()) return std::nullopt;
  int index = 0;
  for (const char c : device.substr(kPrefix.size())) {
    if (c < '0' || c > '9' || index > 100000) return std::nullopt;
    index = index * 10 + (c - '0');
  }
  return index;
}

void export_rank_environment(const RankEnvironment& environment) {
  setenv("RANK", std::to_string(environment.rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(environment.local_rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(environment.world_size).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(environment.local_world_size).c_str(), 1);
}

int compute_threads(const std::function<const char*(const char*)>& getenv, int bound_cores,
                    int machine_cores, int local_world_size) {
  if (const std::optional<int> threads = number(getenv("OMP_NUM_THREADS")); threads > 0) {
    return *threads;
  }
  if (bound_cores > 0) return bound_cores;
  return std::max(1, machine_cores / std::max(1, local_world_size));
}

}  // namespace dslaunch::worker
