#include "launcher/runner/launch_command.h"

#include <fmt/format.h>

#include "topology/placement.h"

namespace dslaunch::runner {
namespace {

// Open MPI's hostfile: DeepSpeed's format is Open MPI's own.
std::string openmpi_hostfile(const plan::JobPlan& plan) {
  std::string text;
  for (const topology::HostSlots& host : plan.hosts) {
    text += fmt::format("{} slots={}\n", host.host, host.slots.size());
  }
  return text;
}

// SLURM_HOSTFILE for --distribution=arbitrary: the host of each rank, in order.
std::string slurm_hostfile(const plan::JobPlan& plan) {
  std::string text;
  for (const topology::RankPlacement& rank : plan.placement.ranks) text += rank.host + "\n";
  return text;
}

void forward_environment(const std::map<std::string, std::string>& environment,
                         std::vector<std::string>& argv) {
  for (const auto& [name, value] : environment) {
    argv.push_back("-x");
    argv.push_back(name);
  }
}

}  // namespace

std::map<std::string, std::string> rank_environment(const spec::JobSpec& spec,
                                                    const plan::JobPlan& plan,
                                                    const LaunchInputs& inputs) {
  // Later sources win: the launcher's exports, the spec's env, the
  // controller's own variables.
  std::map<std::string, std::string> environment = inputs.exported_environment;
  for (const auto& [name, value] : spec.env) environment[name] = value;
  environment["MASTER_ADDR"] = inputs.master_address;
  environment["MASTER_PORT"] = std::to_string(inputs.master_port);
  environment["DSL_JOB_ID"] = inputs.job_id;
  environment["DSL_JOB_TOKEN"] = inputs.job_token;
  environment["DSL_RESTART_COUNT"] = std::to_string(inputs.restart_count);
  environment["DSL_CONTROLLER"] = inputs.controller_address;
  environment["DSL_WORLD_SIZE"] = std::to_string(plan.world_size());
  environment["DSL_DEVICE"] = plan.device == spec::Device::kCuda ? "cuda" : "cpu";
  if (spec.cluster.tls.enabled()) {
    environment["DSL_TLS_CA"] = spec.cluster.tls.ca;
    if (spec.cluster.tls.client_certificates) environment["DSL_TLS_CLIENT_CERTIFICATES"] = "1";
  }
  return environment;
}

LaunchCommand build_launch_command(const spec::JobSpec& spec, const plan::JobPlan& plan,
                                   const LaunchInputs& inputs) {
  LaunchCommand command;
  command.environment = rank_environment(spec, plan, inputs);
  const int world = plan.world_size();
  std::vector<std::string>& argv = command.argv;

  if (spec.cluster.runner == spec::Runner::kSlurm) {
    const std::string hostfile = inputs.attempt_dir + "/slurm_hostfile";
    command.files.emplace_back(hostfile, slurm_hostfile(plan));
    command.environment["SLURM_HOSTFILE"] = hostfile;
    argv = {"srun", fmt::format("--ntasks={}", world), fmt::format("--nodes={}", plan.hosts.size()),
            "--distribution=arbitrary", "--kill-on-bad-exit=1", "--label", "--export=ALL",
            // Open MPI finds its peers through Slurm's PMIx server when srun
            // starts the ranks (Debian's Open MPI has no PMI-1/2 support).
            "--mpi=pmix"};
  } else {
    argv = {"mpirun", "-np", std::to_string(world), "--tag-output"};
    if (inputs.running_as_root) argv.push_back("--allow-run-as-root");
    if (spec.cluster.runner == spec::Runner::kOpenMpi) {
      const std::string hostfile = inputs.attempt_dir + "/hostfile";
      const std::string rankfile = inputs.attempt_dir + "/rankfile";
      command.files.emplace_back(hostfile, openmpi_hostfile(plan));
      command.files.emplace_back(rankfile, topology::to_rankfile(plan.placement));
      argv.insert(argv.end(), {"--hostfile", hostfile, "--rankfile", rankfile, "--mca",
                               "plm_rsh_args", fmt::format("-p {}", spec.cluster.ssh_port)});
      if (!spec.cluster.network_interface.empty()) {
        argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", spec.cluster.network_interface,
                                 "--mca", "oob_tcp_if_include", spec.cluster.network_interface});
      }
    } else {
      // One host: each rank binds itself to its planned cores, so mpirun
      // must not bind, and may run more ranks than cores (a 2-core laptop).
      argv.insert(argv.end(), {"--bind-to", "none"});
      if (world > inputs.local_cores) argv.push_back("--oversubscribe");
    }
    forward_environment(command.environment, argv);
  }
  argv.insert(argv.end(), spec.cluster.launcher_args.begin(), spec.cluster.launcher_args.end());
  argv.push_back(inputs.worker_binary);
  argv.insert(argv.end(), inputs.worker_args.begin(), inputs.worker_args.end());
  return command;
}

}  // namespace dslaunch::runner
