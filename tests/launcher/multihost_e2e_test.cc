// Multi-host runs for real, on test hosts of this machine (tools/testhosts.sh:
// network and UTS namespaces on a bridge, each with its own sshd): the
// openmpi runner starts ranks over ssh, the controller listens on the
// address they route to, and what the launcher forwards reaches them. Needs
// root; the test command reports it skipped by name elsewhere.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"

namespace {

namespace fs = std::filesystem;
using dslaunch::testing::CommandResult;
using dslaunch::testing::run_command;
using dslaunch::testing::runfile;

constexpr const char* kSubnet = "198.51.100.0/24";

std::string testhosts(const std::string& args) {
  const CommandResult result = run_command(runfile("tools/testhosts.sh") + " " + args);
  INFO("testhosts.sh " << args << ":\n" << result.output);
  REQUIRE(result.exit_code == 0);
  return result.output;
}

// The test hosts, brought up on first use and removed when the test ends.
class TestHosts {
 public:
  static TestHosts& get() {
    static TestHosts hosts;
    return hosts;
  }
  // `count` hosts of 2 slots; the hostfile naming them.
  std::string up(int count) {
    const std::string output = testhosts(fmt::format("up {}", count));
    std::string last;
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) last = line;
    }
    return last;
  }
  // The pids on `host` that are not its daemons (sshd, and with Slurm
  // slurmd, slurmctld and its slurmscriptd): what a job left behind.
  std::set<std::string> stray_processes(const std::string& host) {
    std::set<std::string> out;
    std::istringstream pids(testhosts("pids " + host));
    for (std::string pid; pids >> pid;) {
      std::ifstream comm("/proc/" + pid + "/comm");
      std::string name;
      std::getline(comm, name);
      if (name != "sshd" && name != "slurmd" && name != "slurmctld" && name != "slurmscriptd") {
        out.insert(pid + " " + name);
      }
    }
    return out;
  }
  ~TestHosts() { run_command(runfile("tools/testhosts.sh") + " down"); }
};

constexpr const char* kFixedBatch = "train_batch_size: 16\n  train_micro_batch_size_per_gpu: 4";

// A small GPT over byte-level tokens; `cluster` is the spec's cluster
// section, `batch` the batch keys of its training section (indented by 2),
// `fault_tolerance` the whole section, `extra` more top-level sections.
fs::path write_spec(const fs::path& dir, const std::string& name, const std::string& cluster,
                    int steps, const std::string& batch = kFixedBatch,
                    const std::string& fault_tolerance =
                        "{heartbeat_interval: 0.5, heartbeat_timeout: 5, max_restarts: 2}",
                    const std::string& extra = "") {
  const fs::path spec = dir / (name + ".yaml");
  std::ofstream(spec) << fmt::format(R"(name: {}
cluster: {}
model:
  num_layers: 2
  hidden_size: 64
  num_attention_heads: 4
  vocab_size: 256
  seq_length: 32
  make_vocab_size_divisible_by: 64
data: {{train: demo}}
training:
  {}
  steps: {}
  eval_interval: 10
  eval_batches: 2
  gradient_clipping: 1.0
  zero_optimization: {{stage: 2, reduce_bucket_size: 20000}}
  optimizer: {{type: AdamW, params: {{lr: 0.003, weight_decay: 0.1}}}}
checkpoint: {{interval: 10, keep: 2}}
fault_tolerance: {}
env: {{DSL_DATA_CACHE: '{}'}}
{})",
                                     name, cluster, batch, steps, fault_tolerance, dir.string(),
                                     extra);
  return spec;
}

// Every step's loss and evaluation loss, from metrics.jsonl.
std::map<int, std::pair<double, double>> losses(const fs::path& job) {
  std::map<int, std::pair<double, double>> out;
  std::ifstream file(job / "metrics.jsonl");
  for (std::string line; std::getline(file, line);) {
    const nlohmann::json json = nlohmann::json::parse(line, nullptr, false);
    if (json.is_discarded() || json.contains("what") || !json.contains("loss")) continue;
    out[json["step"].get<int>()] = {json["loss"].get<double>(), json.value("eval_loss", -1.0)};
  }
  return out;
}

nlohmann::json state_of(const fs::path& job) {
  std::ifstream file(job / "state.json");
  return nlohmann::json::parse(file);
}

// `dslaunch run` in the background; its output and exit code in files.
class BackgroundRun {
 public:
  BackgroundRun(const fs::path& dir, const std::string& args) : dir_(dir) {
    const std::string command = fmt::format(
        "(DSLAUNCH_WORKER='{}' {} run {} > '{}/run.out' 2>&1; echo $? > '{}/run.rc') &",
        runfile("worker/dsworker"), runfile("launcher/dslaunch"), args, dir.string(), dir.string());
    REQUIRE(std::system(command.c_str()) == 0);
  }
  // The exit code, once it ended within `timeout`.
  std::optional<int> wait(std::chrono::seconds timeout) const {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      std::ifstream rc(dir_ / "run.rc");
      int code = -1;
      if (rc >> code) return code;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return std::nullopt;
  }
  std::string output() const {
    std::ifstream file(dir_ / "run.out");
    return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }

 private:
  fs::path dir_;
};

// Waits until the job's metrics reach `step`.
void wait_for_step(const fs::path& job, int step) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < until) {
    const auto seen = losses(job);
    if (!seen.empty() && seen.rbegin()->first >= step) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL("the job did not reach step " << step);
}

// The job's events of `kind`, in order.
std::vector<nlohmann::json> events_of(const fs::path& job, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::ifstream file(job / "events.jsonl");
  for (std::string line; std::getline(file, line);) {
    const nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
    if (!event.is_discarded() && event["kind"] == kind) out.push_back(event);
  }
  return out;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

fs::path test_dir(const std::string& name) {
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / name;
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE(
    "the demo job on 2 test hosts x 2 slots through the openmpi runner trains the same bits as "
    "4 ranks on one host, with the launcher's variables on every rank") {
  const std::string hostfile = TestHosts::get().up(2);
  const fs::path dir = test_dir("same_bits");

  // Each rank records where it runs and what it was given, then becomes
  // the worker.
  const fs::path wrapper = dir / "worker.sh";
  std::ofstream(wrapper) << fmt::format(
      "#!/bin/sh\nenv > '{}/env.'$(hostname).$OMPI_COMM_WORLD_RANK\nexec '{}' \"$@\"\n",
      dir.string(), runfile("worker/dsworker"));
  fs::permissions(wrapper, fs::perms::owner_all);
  std::ofstream(dir / "ds_env") << "# forwarded to every rank\nDSL_TEST_FROM_FILE=file value\n";

  // jobs/demo.yaml, shortened: 4 ranks of micro-batch 4 (the same batch of
  // 16), 12 steps with evaluations.
  const std::string demo = fmt::format(
      "{} --set training.steps=12 --set training.eval_interval=6 "
      "--set training.train_micro_batch_size_per_gpu=4 --set env.DSL_DATA_CACHE='{}' "
      "--progress off",
      runfile("jobs/demo.yaml"), dir.string());
  const CommandResult run = run_command(fmt::format(
      "cd '{}' && DSLAUNCH_WORKER='{}' DS_ENV_FILE='{}' NCCL_TEST_MARK=from-launcher {} run {} "
      "--hostfile {} --set cluster.runner=openmpi --set cluster.network_interface={} "
      "--set cluster.launcher_args=\"--mca btl self,tcp --mca plm_rsh_agent 'ssh -q'\" "
      "--job-dir '{}'",
      dir.string(), wrapper.string(), (dir / "ds_env").string(), runfile("launcher/dslaunch"), demo,
      hostfile, kSubnet, (dir / "multi_job").string()));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);

  const CommandResult one_host = run_command(
      fmt::format("DSLAUNCH_WORKER='{}' {} run {} --set cluster.num_gpus=4 --job-dir '{}'",
                  runfile("worker/dsworker"), runfile("launcher/dslaunch"), demo,
                  (dir / "local_job").string()));
  INFO(one_host.output);
  REQUIRE(one_host.exit_code == 0);

  const auto multi_losses = losses(dir / "multi_job");
  REQUIRE(multi_losses.size() == 12);
  CHECK(multi_losses == losses(dir / "local_job"));  // bit for bit, evaluation too
  CHECK(multi_losses.at(12).second > 0);

  // Ranks 0-1 ran on dsl-h1 and 2-3 on dsl-h2 (their own hostnames), as the
  // plan and state.json say.
  const nlohmann::json state = state_of(dir / "multi_job");
  for (int rank = 0; rank < 4; ++rank) {
    const std::string host = rank < 2 ? "dsl-h1" : "dsl-h2";
    CHECK(state["ranks"][rank]["host"] == host);
    const fs::path env = dir / fmt::format("env.{}.{}", host, rank);
    INFO(env);
    REQUIRE(fs::exists(env));
    std::ifstream file(env);
    std::set<std::string> lines;
    for (std::string line; std::getline(file, line);) lines.insert(line);
    CHECK(lines.count("NCCL_TEST_MARK=from-launcher") == 1);
    CHECK(lines.count("DSL_TEST_FROM_FILE=file value") == 1);
    CHECK(lines.count(fmt::format("DSL_CONTROLLER={}",
                                  state["controller_address"].get<std::string>())) == 1);
  }
  CHECK(state["controller_address"].get<std::string>().rfind("198.51.100.1:", 0) == 0);

  // The launcher_args reached mpirun, after the runner's own.
  std::ifstream events(dir / "multi_job" / "events.jsonl");
  bool launched = false;
  for (std::string line; std::getline(events, line);) {
    const nlohmann::json event = nlohmann::json::parse(line);
    if (event["kind"] != "launching") continue;
    launched = true;
    CHECK_THAT(event["detail"].get<std::string>(),
               Catch::Contains("--mca btl self,tcp --mca plm_rsh_agent ssh -q "));
  }
  CHECK(launched);
  for (const char* host : {"dsl-h1", "dsl-h2"}) {
    CHECK(TestHosts::get().stray_processes(host).empty());
  }
}

namespace {

constexpr int kLongSteps = 60;
constexpr double kHeartbeatTimeout = 5;

std::string cluster_of(const std::string& hostfile) {
  return fmt::format("{{device: cpu, runner: openmpi, hostfile: {}, network_interface: '{}'}}",
                     hostfile, kSubnet);
}

// The losses of kLongSteps steps of 4 ranks without a fault (on one host:
// the same bits as on two, as the first test shows).
const std::map<int, std::pair<double, double>>& uninterrupted() {
  static const std::map<int, std::pair<double, double>> reference = [] {
    const fs::path dir = test_dir("uninterrupted");
    const fs::path spec = write_spec(dir, "reference", "{device: cpu, num_gpus: 4}", kLongSteps);
    const CommandResult run = run_command(fmt::format(
        "DSLAUNCH_WORKER='{}' {} run {} --job-dir '{}' --progress off", runfile("worker/dsworker"),
        runfile("launcher/dslaunch"), spec.string(), (dir / "job").string()));
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    return losses(dir / "job");
  }();
  return reference;
}

// DeepSpeed's elasticity over 1, 2 or 4 ranks: train batch 16 (micro-batch
// 4 on 4 and on 2 ranks, with 2 accumulation steps on 2).
constexpr const char* kElasticBatch =
    "elasticity: {enabled: true, max_train_batch_size: 16, micro_batch_sizes: [2, 4], "
    "min_gpus: 1, max_gpus: 4, version: 0.1}";

// The first attempt takes a second a step after step 25, so that a fault
// made once step 25 is seen lands before the checkpoint of step 30 (the
// steps take milliseconds otherwise). Sleeping changes no bits.
constexpr const char* kSlowAfterStep25 =
    "testing: {fault: {kind: slow, rank: 0, step: 26, seconds: 1}}\n";

enum class HostFault { kKill, kPartition };

// Runs `spec` on both test hosts and breaks dsl-h2 once step 25 is done
// (after the checkpoint of step 20); returns when the fault is in, with
// the time it happened.
double break_second_host_mid_run(const fs::path& job, HostFault fault) {
  wait_for_step(job, 25);
  const double when = unix_seconds();
  testhosts(fault == HostFault::kKill ? "kill dsl-h2" : "partition dsl-h2");
  return when;
}

// The first failed attempt: detected within the heartbeat timeout of the
// fault, and blamed on dsl-h2.
void check_host_blamed(const fs::path& job, double fault_time) {
  const std::vector<nlohmann::json> detected = events_of(job, "failure_detected");
  REQUIRE_FALSE(detected.empty());
  CHECK(detected.front()["time"].get<double>() - fault_time <= kHeartbeatTimeout + 1);
  const std::vector<nlohmann::json> lost = events_of(job, "host_lost");
  REQUIRE(lost.size() == 1);
  CHECK_THAT(lost.front()["detail"].get<std::string>(), Catch::StartsWith("dsl-h2: "));
  const nlohmann::json state = state_of(job);
  CHECK_THAT(state["attempts"][0]["reason"].get<std::string>(),
             Catch::StartsWith("host lost: dsl-h2 ("));
}

// No process of the job is left on either host (a partitioned host's ranks
// end by themselves once they miss the controller).
void check_hosts_clean() {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::set<std::string> left;
  do {
    left.clear();
    for (const char* host : {"dsl-h1", "dsl-h2"}) {
      for (const std::string& process : TestHosts::get().stray_processes(host)) {
        left.insert(std::string(host) + ": " + process);
      }
    }
    if (left.empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  } while (std::chrono::steady_clock::now() < until);
  for (const std::string& process : left) INFO(process);
  CHECK(left.empty());
}

void elastic_case(HostFault fault) {
  const std::string hostfile = TestHosts::get().up(2);
  const auto& reference = uninterrupted();
  const fs::path dir = test_dir(fault == HostFault::kKill ? "elastic_kill" : "elastic_partition");
  const fs::path spec =
      write_spec(dir, "elastic", cluster_of(hostfile), kLongSteps, kElasticBatch,
                 "{heartbeat_interval: 0.5, heartbeat_timeout: 5, max_restarts: 2}",
                 kSlowAfterStep25);
  BackgroundRun run(
      dir, fmt::format("{} --job-dir '{}' --progress off", spec.string(), (dir / "job").string()));
  const double fault_time = break_second_host_mid_run(dir / "job", fault);
  const std::optional<int> code = run.wait(std::chrono::seconds(240));
  INFO(run.output());
  REQUIRE(code == 0);
  CHECK_THAT(run.output(), Catch::Contains("going on without dsl-h2 (elasticity): 2 rank(s) on 1 "
                                           "host(s), train batch 16 = micro-batch 4 x "
                                           "accumulation 2 x data-parallel 2"));
  check_host_blamed(dir / "job", fault_time);

  // The last attempt ran on dsl-h1 alone, from the checkpoint of step 20.
  const nlohmann::json state = state_of(dir / "job");
  REQUIRE(state["ranks"].size() == 2);
  for (const auto& rank : state["ranks"]) CHECK(rank["host"] == "dsl-h1");
  CHECK(state["attempts"].back()["resumed_from_step"] == 20);

  // Before the fault, the 4-rank bits; after it, the same batch of the same
  // samples summed in another order.
  const auto seen = losses(dir / "job");
  REQUIRE(seen.size() == kLongSteps);
  for (int step = 1; step <= 20; ++step) CHECK(seen.at(step) == reference.at(step));
  for (int step = 21; step <= kLongSteps; ++step) {
    INFO("step " << step);
    CHECK(seen.at(step).first == Approx(reference.at(step).first).epsilon(1e-4));
  }
  if (fault == HostFault::kPartition) testhosts("heal dsl-h2");
  check_hosts_clean();
}

// A job without elasticity on both hosts, waiting up to `host_wait_timeout`
// seconds for a lost host, whose dsl-h2 is killed once step 25 is done.
struct WaitingJob {
  fs::path dir;
  std::optional<BackgroundRun> run;
  double fault_time = 0;
};

WaitingJob start_waiting_job(const std::string& name, int host_wait_timeout) {
  const std::string hostfile = TestHosts::get().up(2);
  WaitingJob job;
  job.dir = test_dir(name);
  const fs::path spec =
      write_spec(job.dir, name, cluster_of(hostfile), kLongSteps, kFixedBatch,
                 fmt::format("{{heartbeat_interval: 0.5, heartbeat_timeout: 5, max_restarts: 2, "
                             "host_wait_timeout: {}}}",
                             host_wait_timeout),
                 kSlowAfterStep25);
  job.run.emplace(job.dir, fmt::format("{} --job-dir '{}' --progress off", spec.string(),
                                       (job.dir / "job").string()));
  job.fault_time = break_second_host_mid_run(job.dir / "job", HostFault::kKill);
  return job;
}

}  // namespace

TEST_CASE(
    "the second host killed mid-run: detected, blamed, and with elasticity the job ends on "
    "the first host alone from its last checkpoint") {
  elastic_case(HostFault::kKill);
}

TEST_CASE("the second host partitioned mid-run: the same, and its ranks end by themselves") {
  elastic_case(HostFault::kPartition);
}

TEST_CASE(
    "without elasticity a lost host that comes back within host_wait_timeout: the job "
    "resumes on both hosts with the uninterrupted bits") {
  const auto& reference = uninterrupted();
  WaitingJob job = start_waiting_job("host_back", 120);
  const fs::path& dir = job.dir;
  const BackgroundRun& run = *job.run;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (run.output().find("waiting up to 120s") == std::string::npos &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  INFO(run.output());
  REQUIRE_THAT(run.output(),
               Catch::Contains("waiting up to 120s (fault_tolerance.host_wait_timeout) "
                               "for dsl-h2 to answer again"));
  TestHosts::get().up(2);  // the host is back: its sshd answers again
  const std::optional<int> code = run.wait(std::chrono::seconds(240));
  INFO(run.output());
  REQUIRE(code == 0);
  check_host_blamed(dir / "job", job.fault_time);
  CHECK(losses(dir / "job") == reference);
  check_hosts_clean();
}

TEST_CASE(
    "without elasticity a lost host that stays away fails the job, naming it, after "
    "host_wait_timeout") {
  WaitingJob job = start_waiting_job("host_gone", 3);
  const fs::path& dir = job.dir;
  const BackgroundRun& run = *job.run;
  const std::optional<int> code = run.wait(std::chrono::seconds(120));
  INFO(run.output());
  REQUIRE(code == 1);
  CHECK_THAT(run.output(), Catch::Contains("[error] dsl-h2 did not answer within 3s; the job "
                                           "stops here"));
  check_host_blamed(dir / "job", job.fault_time);
  CHECK(state_of(dir / "job")["attempts"].size() == 1);
  TestHosts::get().up(2);
  check_hosts_clean();
}

namespace {

// A Slurm cluster on the 2 test hosts; the SLURM_CONF of it.
std::string slurm_cluster() {
  TestHosts::get().up(2);
  std::istringstream lines(testhosts("slurm"));
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) last = line;
  }
  return last;
}

// sbatch of a script that runs `dslaunch run` on 2 nodes x 2 tasks with the
// slurm runner (its spec given `extra` sections); the Slurm job id.
std::string submit(const fs::path& dir, const std::string& slurm_conf,
                   const std::string& extra = "") {
  const fs::path spec = write_spec(
      dir, "slurm", fmt::format("{{device: cpu, runner: slurm, network_interface: '{}'}}", kSubnet),
      kLongSteps, kFixedBatch, "{heartbeat_interval: 0.5, heartbeat_timeout: 5, max_restarts: 2}",
      extra);
  const fs::path script = dir / "job.sh";
  std::ofstream(script) << fmt::format(
      "#!/bin/bash\n"
      "#SBATCH --nodes=2 --ntasks-per-node=2 --requeue --open-mode=append\n"
      "#SBATCH --output={0}/slurm-%j.out\n"
      "export DSLAUNCH_WORKER='{1}'\n"
      "exec '{2}' run '{3}' --job-dir '{0}/job' --progress plain\n",
      dir.string(), runfile("worker/dsworker"), runfile("launcher/dslaunch"), spec.string());
  const CommandResult submitted = run_command(
      fmt::format("SLURM_CONF='{}' sbatch --parsable '{}'", slurm_conf, script.string()));
  INFO(submitted.output);
  REQUIRE(submitted.exit_code == 0);
  std::string id = submitted.output;
  while (!id.empty() && (id.back() == '\n' || id.back() == '\r')) id.pop_back();
  return id;
}

// Waits until Slurm no longer lists job `id` (it ended, requeues included).
void wait_for_slurm_job(const std::string& slurm_conf, const std::string& id) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (std::chrono::steady_clock::now() < until) {
    const CommandResult queued =
        run_command(fmt::format("SLURM_CONF='{}' squeue -h -j {} -o %T", slurm_conf, id));
    if (queued.exit_code == 0 && queued.output.empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  FAIL("Slurm job " << id << " did not end within 300 s");
}

std::string slurm_output(const fs::path& dir, const std::string& id) {
  std::ifstream file(dir / fmt::format("slurm-{}.out", id));
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("Slurm: an sbatch job over 2 test hosts trains the bits of 4 local ranks") {
  const std::string slurm_conf = slurm_cluster();
  const auto& reference = uninterrupted();
  const fs::path dir = test_dir("slurm_plain");
  const std::string id = submit(dir, slurm_conf);
  wait_for_slurm_job(slurm_conf, id);
  INFO(slurm_output(dir, id));
  const nlohmann::json state = state_of(dir / "job");
  CHECK(state["state"] == "SUCCEEDED");
  REQUIRE(state["ranks"].size() == 4);
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(state["ranks"][rank]["host"] == (rank < 2 ? "dsl-h1" : "dsl-h2"));
  }
  CHECK(losses(dir / "job") == reference);
  check_hosts_clean();
}

TEST_CASE(
    "Slurm: a job signalled with USR1 checkpoints, is requeued, and ends with the "
    "uninterrupted run's losses") {
  const std::string slurm_conf = slurm_cluster();
  const auto& reference = uninterrupted();
  const fs::path dir = test_dir("slurm_requeue");
  const std::string id = submit(dir, slurm_conf, kSlowAfterStep25);
  wait_for_step(dir / "job", 25);
  // What --signal=USR1@N sends before the time limit: SIGUSR1 to the steps.
  const CommandResult signalled =
      run_command(fmt::format("SLURM_CONF='{}' scancel --signal=USR1 {}", slurm_conf, id));
  INFO(signalled.output);
  REQUIRE(signalled.exit_code == 0);
  wait_for_slurm_job(slurm_conf, id);
  const std::string output = slurm_output(dir, id);
  INFO(output);
  CHECK_THAT(output, Catch::Contains("requeueing Slurm job " + id));
  const CommandResult shown =
      run_command(fmt::format("SLURM_CONF='{}' scontrol show job {}", slurm_conf, id));
  CHECK_THAT(shown.output, Catch::Contains("Restarts=1"));

  const nlohmann::json state = state_of(dir / "job");
  CHECK(state["state"] == "SUCCEEDED");
  REQUIRE(state["attempts"].size() == 2);
  CHECK(state["attempts"][0]["state"] == "STOPPED");
  CHECK(state["attempts"][1]["resumed_from_step"].get<int>() >= 20);
  // Every step's loss, and the evaluations of the uninterrupted run (the
  // stopped attempt also evaluated after its last step).
  const auto seen = losses(dir / "job");
  REQUIRE(seen.size() == reference.size());
  for (const auto& [step, expected] : reference) {
    INFO("step " << step);
    CHECK(seen.at(step).first == expected.first);
    if (expected.second > 0) CHECK(seen.at(step).second == expected.second);
  }
  check_hosts_clean();
}
