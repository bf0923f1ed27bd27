#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launcher/plan/job_plan.h"
#include "core/spec/job_spec.h"

namespace dslaunch::runner {

// What the controller knows when it starts one attempt.
struct LaunchInputs {
  std::string worker_binary;             // absolute path of dsworker on every host
  std::vector<std::string> worker_args;  // e.g. {"run"}
  std::string attempt_dir;  // where the runner's own files (hostfile, rankfile) are written
  std::string job_id;
  std::string job_token;  // DSL_JOB_TOKEN: reaches the ranks by name only
  int restart_count = 0;
  std::string controller_address;  // host:port the ranks dial
  std::string master_address;      // MASTER_ADDR: rank 0's host
  int master_port = 29500;         // MASTER_PORT, as torchrun's default
  bool running_as_root = false;    // mpirun must be told that this is intended
  int local_cores = 1;             // this machine's cores (local runner oversubscription)
  // The launcher's variables every rank gets (exported_environment.h).
  std::map<std::string, std::string> exported_environment;
};

// How to start every rank of one attempt through an existing launcher.
struct LaunchCommand {
  std::vector<std::string> argv;  // mpirun ... or srun ...
  // Variables to add to the launcher process's environment. Each reaches
  // every rank by name (mpirun -x NAME, srun --export=ALL), so values such as
  // the job token never appear on a command line.
  std::map<std::string, std::string> environment;
  // Files to write before starting (path -> contents): Open MPI's hostfile
  // and rankfile, Slurm's SLURM_HOSTFILE.
  std::vector<std::pair<std::string, std::string>> files;
};

// The variables every rank gets from the controller (besides RANK,
// LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE, which each rank takes from
// its launcher: OMPI_COMM_WORLD_* or SLURM_*): MASTER_ADDR, MASTER_PORT,
// DSL_JOB_ID, DSL_JOB_TOKEN, DSL_RESTART_COUNT, DSL_CONTROLLER,
// DSL_WORLD_SIZE, DSL_DEVICE (cpu or cuda), DSL_TLS_CA (with cluster.tls),
// DSL_TLS_CLIENT_CERTIFICATES=1 (with cluster.tls.client_certificates),
// and the spec's env (which cannot override those).
std::map<std::string, std::string> rank_environment(const spec::JobSpec& spec,
                                                    const plan::JobPlan& plan,
                                                    const LaunchInputs& inputs);

// The command for the spec's runner:
//  - local: mpirun on this host, one rank per planned slot, output tagged by rank;
//  - openmpi: mpirun with a hostfile and the planner's rankfile, over ssh on
//    cluster.ssh_port, TCP restricted to cluster.network_interface when given;
//  - slurm: srun inside the allocation, ranks placed exactly as planned
//    (--distribution=arbitrary with SLURM_HOSTFILE), output labelled by rank,
//    Open MPI wired up through Slurm's PMIx (--mpi=pmix).
// cluster.launcher_args come last before the worker, so they can add to or
// override what the runner chose. Pure: writes nothing itself.
LaunchCommand build_launch_command(const spec::JobSpec& spec, const plan::JobPlan& plan,
                                   const LaunchInputs& inputs);

}  // namespace dslaunch::runner
