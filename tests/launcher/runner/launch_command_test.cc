#include "launcher/runner/launch_command.h"

#include <algorithm>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "topology/host_filter.h"
#include "topology/placement.h"
#include "topology/process_grid.h"

namespace dslaunch::runner {
namespace {

using Argv = std::vector<std::string>;

// A plan of `hosts` x `slots` with one rank per slot (data parallel only).
plan::JobPlan plan_of(int hosts, int slots, spec::Device device) {
  plan::JobPlan plan;
  plan.device = device;
  for (int h = 0; h < hosts; ++h) {
    topology::HostSlots host{fmt::format("node{}", h + 1), {}};
    for (int s = 0; s < slots; ++s) host.slots.push_back(s);
    plan.hosts.push_back(host);
  }
  plan.grid = topology::ProcessGrid(topology::GridShape{1, hosts * slots, 1});
  topology::HostTopology inside;
  inside.cores = 4;
  plan.placement = topology::place_ranks(
      plan.grid, plan.hosts, inside,
      device == spec::Device::kCuda ? topology::DeviceKind::kCuda : topology::DeviceKind::kCpu);
  return plan;
}

LaunchInputs inputs() {
  LaunchInputs in;
  in.worker_binary = "/opt/dslaunch/dsworker";
  in.worker_args = {"run"};
  in.attempt_dir = "/jobs/j1/attempt_0";
  in.job_id = "j1";
  in.job_token = "s3cret-token";
  in.restart_count = 2;
  in.controller_address = "10.0.0.1:40000";
  in.master_address = "10.0.0.1";
  in.master_port = 29500;
  in.local_cores = 2;
  return in;
}

const Argv kForwarded = {
    "-x", "DSL_CONTROLLER", "-x", "DSL_DEVICE",        "-x", "DSL_JOB_ID",
    "-x", "DSL_JOB_TOKEN",  "-x", "DSL_RESTART_COUNT", "-x", "DSL_WORLD_SIZE",
    "-x", "MASTER_ADDR",    "-x", "MASTER_PORT",       "-x", "OMP_NUM_THREADS"};

spec::JobSpec spec_for(spec::Runner runner) {
  spec::JobSpec spec;
  spec.cluster.runner = runner;
  spec.env = {{"OMP_NUM_THREADS", "1"}};
  return spec;
}

}  // namespace

TEST_CASE("every rank gets the controller's variables and the spec's env") {
  const auto environment =
      rank_environment(spec_for(spec::Runner::kLocal), plan_of(1, 2, spec::Device::kCpu), inputs());
  CHECK(environment == std::map<std::string, std::string>{{"DSL_CONTROLLER", "10.0.0.1:40000"},
                                                          {"DSL_DEVICE", "cpu"},
                                                          {"DSL_JOB_ID", "j1"},
                                                          {"DSL_JOB_TOKEN", "s3cret-token"},
                                                          {"DSL_RESTART_COUNT", "2"},
                                                          {"DSL_WORLD_SIZE", "2"},
                                                          {"MASTER_ADDR", "10.0.0.1"},
                                                          {"MASTER_PORT", "29500"},
                                                          {"OMP_NUM_THREADS", "1"}});
}

TEST_CASE("the spec's env cannot replace the controller's own variables") {
  spec::JobSpec spec = spec_for(spec::Runner::kLocal);
  spec.env["DSL_JOB_TOKEN"] = "forged";
  spec.env["MASTER_PORT"] = "1";
  const auto environment = rank_environment(spec, plan_of(1, 2, spec::Device::kCpu), inputs());
  CHECK(environment.at("DSL_JOB_TOKEN") == "s3cret-token");
  CHECK(environment.at("MASTER_PORT") == "29500");
}

TEST_CASE("the launcher's exported variables reach every rank; the spec's env overrides them") {
  LaunchInputs in = inputs();
  in.exported_environment = {
      {"NCCL_DEBUG", "INFO"}, {"OMP_NUM_THREADS", "8"}, {"DSL_JOB_TOKEN", "forged"}};
  const LaunchCommand command =
      build_launch_command(spec_for(spec::Runner::kOpenMpi), plan_of(2, 2, spec::Device::kCpu), in);
  CHECK(command.environment.at("NCCL_DEBUG") == "INFO");
  CHECK(command.environment.at("OMP_NUM_THREADS") == "1");  // the spec's
  CHECK(command.environment.at("DSL_JOB_TOKEN") == "s3cret-token");
  const auto forwarded = std::find(command.argv.begin(), command.argv.end(), "NCCL_DEBUG");
  REQUIRE(forwarded != command.argv.end());
  CHECK(*(forwarded - 1) == "-x");
}

TEST_CASE("cluster.launcher_args come last before the worker, for every runner") {
  for (const spec::Runner runner :
       {spec::Runner::kLocal, spec::Runner::kOpenMpi, spec::Runner::kSlurm}) {
    spec::JobSpec spec = spec_for(runner);
    spec.cluster.launcher_args = {"--mca", "plm_rsh_agent", "ssh -F /etc/cluster ssh"};
    const LaunchCommand command =
        build_launch_command(spec, plan_of(1, 2, spec::Device::kCpu), inputs());
    const Argv tail(command.argv.end() - 5, command.argv.end());
    CHECK(tail == Argv{"--mca", "plm_rsh_agent", "ssh -F /etc/cluster ssh",
                       "/opt/dslaunch/dsworker", "run"});
  }
}

TEST_CASE("the local runner is mpirun on this host, oversubscribed past its cores") {
  LaunchInputs in = inputs();
  in.running_as_root = true;
  const LaunchCommand command =
      build_launch_command(spec_for(spec::Runner::kLocal), plan_of(1, 4, spec::Device::kCpu), in);
  Argv expected = {
      "mpirun",         "-np", "4", "--tag-output", "--allow-run-as-root", "--bind-to", "none",
      "--oversubscribe"};
  expected.insert(expected.end(), kForwarded.begin(), kForwarded.end());
  expected.insert(expected.end(), {"/opt/dslaunch/dsworker", "run"});
  CHECK(command.argv == expected);
  CHECK(command.files.empty());
}

TEST_CASE("the local runner does not oversubscribe when the ranks fit the cores") {
  const LaunchCommand command = build_launch_command(spec_for(spec::Runner::kLocal),
                                                     plan_of(1, 2, spec::Device::kCpu), inputs());
  CHECK(std::count(command.argv.begin(), command.argv.end(), "--oversubscribe") == 0);
  CHECK(std::count(command.argv.begin(), command.argv.end(), "--allow-run-as-root") == 0);
}

TEST_CASE("the openmpi runner passes the hostfile, the planner's rankfile and ssh settings") {
  spec::JobSpec spec = spec_for(spec::Runner::kOpenMpi);
  spec.cluster.ssh_port = 2222;
  spec.cluster.network_interface = "ib0";
  const plan::JobPlan plan = plan_of(2, 2, spec::Device::kCuda);
  const LaunchCommand command = build_launch_command(spec, plan, inputs());
  Argv expected = {"mpirun",
                   "-np",
                   "4",
                   "--tag-output",
                   "--hostfile",
                   "/jobs/j1/attempt_0/hostfile",
                   "--rankfile",
                   "/jobs/j1/attempt_0/rankfile",
                   "--mca",
                   "plm_rsh_args",
                   "-p 2222",
                   "--mca",
                   "btl_tcp_if_include",
                   "ib0",
                   "--mca",
                   "oob_tcp_if_include",
                   "ib0"};
  expected.insert(expected.end(), kForwarded.begin(), kForwarded.end());
  expected.insert(expected.end(), {"/opt/dslaunch/dsworker", "run"});
  CHECK(command.argv == expected);
  REQUIRE(command.files.size() == 2);
  CHECK(command.files[0] == std::pair<std::string, std::string>{"/jobs/j1/attempt_0/hostfile",
                                                                "node1 slots=2\nnode2 slots=2\n"});
  CHECK(command.files[1].first == "/jobs/j1/attempt_0/rankfile");
  CHECK(command.files[1].second == topology::to_rankfile(plan.placement));
}

TEST_CASE("the slurm runner places ranks exactly as planned through SLURM_HOSTFILE") {
  const LaunchCommand command = build_launch_command(spec_for(spec::Runner::kSlurm),
                                                     plan_of(2, 2, spec::Device::kCuda), inputs());
  CHECK(command.argv == Argv{"srun", "--ntasks=4", "--nodes=2", "--distribution=arbitrary",
                             "--kill-on-bad-exit=1", "--label", "--export=ALL", "--mpi=pmix",
                             "/opt/dslaunch/dsworker", "run"});
  REQUIRE(command.files.size() == 1);
  CHECK(command.files[0] == std::pair<std::string, std::string>{"/jobs/j1/attempt_0/slurm_hostfile",
                                                                "node1\nnode1\nnode2\nnode2\n"});
  CHECK(command.environment.at("SLURM_HOSTFILE") == "/jobs/j1/attempt_0/slurm_hostfile");
}

TEST_CASE("the job token never appears on a command line") {
  for (const spec::Runner runner :
       {spec::Runner::kLocal, spec::Runner::kOpenMpi, spec::Runner::kSlurm}) {
    const LaunchCommand command =
        build_launch_command(spec_for(runner), plan_of(1, 2, spec::Device::kCpu), inputs());
    for (const std::string& arg : command.argv) CHECK(arg.find("s3cret") == std::string::npos);
    CHECK(command.environment.at("DSL_JOB_TOKEN") == "s3cret-token");
  }
}

}  // namespace dslaunch::runner
