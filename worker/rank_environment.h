#pragma once

#include <functional>
#include <optional>
#include <string>

namespace dslaunch::worker {

// Where this process sits in the job, as torchrun users know it.
struct RankEnvironment {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
};

// Reads it from the launcher that started this process: Open MPI
// (OMPI_COMM_WORLD_RANK, _LOCAL_RANK, _SIZE, _LOCAL_SIZE); Slurm's srun
// (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, and this node's entry, by
// SLURM_NODEID, of SLURM_STEP_TASKS_PER_NODE such as "4(x2),3"); else
// RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE already set (torchrun).
// std::nullopt when none is there or the values are not consistent numbers;
// `error` names the variables.
std::optional<RankEnvironment> read_rank_environment(
    const std::function<const char*(const char*)>& getenv, std::string& error);

// Threads for the rank's kernels: OMP_NUM_THREADS where `getenv` gives a
// positive integer (as torchrun and DeepSpeed users set it), otherwise one
// per core the rank is bound to (`bound_cores` > 0), otherwise an equal
// share of the machine's `machine_cores` among the host's
// `local_world_size` ranks; at least 1.
int compute_threads(const std::function<const char*(const char*)>& getenv, int bound_cores,
                    int machine_cores, int local_world_size);

// The GPU index of the plan's device for this rank, "cuda:<index>";
// std::nullopt for "cpu" or anything else.
std::optional<int> planned_gpu(const std::string& device);

// Sets RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE in this process's
// environment, so libraries and user code find them where torchrun puts them.
void export_rank_environment(const RankEnvironment& environment);

}  // namespace dslaunch::worker
