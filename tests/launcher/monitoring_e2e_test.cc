// DeepSpeed's monitors and the Prometheus endpoint on a real `dslaunch run`:
// the endpoint scraped while the job trains and its text parsed; the
// TensorBoard event file read back by the independent reader
// (tests/core/monitor/read_tensorboard_events.py) and the CSV files, both
// against metrics.jsonl.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"

namespace {

namespace fs = std::filesystem;
using dslaunch::testing::run_command;
using dslaunch::testing::runfile;

// A port free now (the OS picks it).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// One sample of the exposition: name, labels, value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses Prometheus's text format strictly: every line a comment (# HELP or
// # TYPE of a family declared once, before its samples) or a sample.
std::vector<Sample> parse_exposition(const std::string& text) {
  static const std::regex kSample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$)");
  static const std::regex kLabel(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?)re");
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      INFO(line);
      CHECK((type == "gauge" || type == "counter"));
      CHECK(types.emplace(name, type).second);
      continue;
    }
    std::smatch match;
    INFO(line);
    REQUIRE(std::regex_match(line, match, kSample));
    Sample sample{match[1], {}, std::stod(match[3])};
    CHECK(types.contains(sample.name));
    const std::string labels = match[2];
    for (auto it = std::sregex_iterator(labels.begin(), labels.end(), kLabel);
         it != std::sregex_iterator(); ++it) {
      sample.labels[(*it)[1]] = (*it)[2];
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

const Sample* find(const std::vector<Sample>& samples, const std::string& name,
                   const std::string& rank = "") {
  for (const Sample& sample : samples) {
    if (sample.name != name) continue;
    if (!rank.empty() && sample.labels.at("rank") != rank) continue;
    return &sample;
  }
  return nullptr;
}

// The sample, which must be there.
const Sample& get(const std::vector<Sample>& samples, const std::string& name,
                  const std::string& rank = "") {
  const Sample* sample = find(samples, name, rank);
  INFO(name << " " << rank);
  REQUIRE(sample != nullptr);
  return *sample;
}

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

TEST_CASE("a run's TensorBoard, CSV and Prometheus monitors report what metrics.jsonl holds") {
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / "monitoring";
  fs::create_directories(dir);
  const int port = free_port();
  const fs::path spec = dir / "job.yaml";
  std::ofstream(dir / "token.txt") << "scrape-secret\n";
  std::ofstream(spec) << fmt::format(R"(name: watched
cluster: {{device: cpu, num_gpus: 2, metrics_port: {}, metrics_token_file: token.txt}}
model: {{num_layers: 2, hidden_size: 64, num_attention_heads: 2, vocab_size: 256, seq_length: 32,
        make_vocab_size_divisible_by: 64}}
data: {{train: demo}}
training:
  train_batch_size: 8
  steps: 60
  eval_interval: 20
  eval_batches: 1
  optimizer: {{type: AdamW, params: {{lr: 0.003}}}}
  tensorboard: {{enabled: true}}
  csv_monitor: {{enabled: true, output_path: {}, job_name: csv-run}}
  steps_per_print: 10
  wall_clock_breakdown: true
fault_tolerance: {{heartbeat_interval: 0.2, heartbeat_timeout: 60}}
# Steps of this model take milliseconds: slowed, the run lasts the seconds
# the scrapes below need to see it running.
testing: {{fault: {{kind: slow, rank: 0, step: 2, seconds: 0.05}}}}
env: {{DSL_DATA_CACHE: '{}'}}
)",
                                     port, (dir / "csv").string(), dir.string());
  const fs::path job = dir / "job";
  const std::string command = fmt::format(
      "DSLAUNCH_LOG_LEVEL=debug DSLAUNCH_HOME='{}' DSLAUNCH_WORKER='{}' {} run {} --job-dir {} "
      "--progress off",
      dir.string(),
      runfile("worker/dsworker"), runfile("launcher/dslaunch"), spec.string(), job.string());
  dslaunch::testing::CommandResult run;
  std::atomic<bool> ended{false};
  std::thread runner([&] {
    run = run_command(command + " 2>&1");
    ended.store(true);
  });

  // Scrape until a step shows, while the job trains.
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1);
  std::vector<Sample> scraped;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < until && !ended.load()) {
    // Without the token (cluster.metrics_token_file): refused.
    if (auto refused = client.Get("/metrics"); refused) CHECK(refused->status == 401);
    if (auto response = client.Get("/metrics", {{"Authorization", "Bearer scrape-secret"}});
        response && response->status == 200) {
      CHECK_THAT(response->get_header_value("Content-Type"), Catch::Contains("version=0.0.4"));
      scraped = parse_exposition(response->body);
      const Sample* step = find(scraped, "dslaunch_job_step");
      if (step != nullptr && step->value >= 1 && find(scraped, "dslaunch_job_loss") != nullptr) {
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  runner.join();
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  REQUIRE(find(scraped, "dslaunch_job_step") != nullptr);
  CHECK(get(scraped, "dslaunch_job_step").labels.at("job") == "job");
  CHECK(get(scraped, "dslaunch_job_step").labels.at("name") == "watched");
  CHECK(get(scraped, "dslaunch_job_total_steps").value == 60);
  CHECK(get(scraped, "dslaunch_job_restarts_total").value == 0);
  CHECK(get(scraped, "dslaunch_job_info").labels.at("state") == "RUNNING");
  const double loss = get(scraped, "dslaunch_job_loss").value;
  CHECK(loss > 0);
  CHECK(loss < 7);
  CHECK(get(scraped, "dslaunch_job_tokens_per_second").value > 0);
  CHECK(get(scraped, "dslaunch_job_tflops").value > 0);
  for (const char* rank : {"0", "1"}) {
    CHECK(get(scraped, "dslaunch_rank_up", rank).value == 1);
    CHECK(get(scraped, "dslaunch_rank_heartbeat_age_seconds", rank).value < 60);
    CHECK(get(scraped, "dslaunch_rank_resident_memory_bytes", rank).value > 1e6);
    CHECK(get(scraped, "dslaunch_rank_peak_resident_memory_bytes", rank).value >=
          get(scraped, "dslaunch_rank_resident_memory_bytes", rank).value);
  }

  // metrics.jsonl: every line carries its attempt; rank 0's steps their samples.
  std::vector<nlohmann::json> steps;
  {
    std::ifstream file(job / "metrics.jsonl");
    std::stringstream text;
    text << file.rdbuf();
    for (nlohmann::json& line : json_lines(text.str())) {
      CHECK(line["attempt"] == 0);
      if (!line.contains("what") && line["rank"] == 0) steps.push_back(std::move(line));
    }
  }
  REQUIRE(steps.size() == 60);
  CHECK(steps[9]["samples"] == 80);

  // TensorBoard: the event file under <job>/tensorboard/<name>, read by the
  // independent reader, holds rank 0's losses at the samples consumed.
  std::vector<fs::path> events;
  for (const auto& entry : fs::directory_iterator(job / "tensorboard" / "watched")) {
    events.push_back(entry.path());
  }
  REQUIRE(events.size() == 1);
  CHECK_THAT(events[0].filename().string(), Catch::StartsWith("events.out.tfevents."));
  const auto read = run_command(
      fmt::format("/usr/bin/python3 {} {} 2>&1",
                  runfile("tests/core/monitor/read_tensorboard_events.py"), events[0].string()));
  INFO(read.output);
  REQUIRE(read.exit_code == 0);
  std::map<std::string, std::map<int64_t, double>> series;
  for (const nlohmann::json& event : json_lines(read.output)) {
    if (!event.contains("tag")) continue;
    series[event["tag"]][event["step"].get<int64_t>()] =
        std::stod(event["value"].get<std::string>());
  }
  REQUIRE(series["Train/Samples/train_loss"].size() == 60);
  CHECK(series["Train/Samples/eval_loss"].size() == 3);
  for (const nlohmann::json& step : steps) {
    const int64_t samples = step["samples"];
    CHECK(series["Train/Samples/train_loss"][samples] ==
          Approx(step["loss"].get<double>()).epsilon(1e-6));
    CHECK(series["Train/Samples/lr"][samples] == Approx(step["lr"].get<double>()).epsilon(1e-6));
  }

  // CSV: DeepSpeed's file per series, header "step,<name>".
  std::ifstream csv(dir / "csv" / "csv-run" / "Train_Samples_train_loss.csv");
  std::string header, first;
  std::getline(csv, header);
  std::getline(csv, first);
  CHECK(header == "step,train_loss");
  CHECK(first == fmt::format("8,{}", steps[0]["loss"].get<double>()));

  // At DSLAUNCH_LOG_LEVEL=debug the controller's log has the job's events.
  {
    std::ifstream log(job / "logs" / "controller.log");
    std::stringstream text;
    text << log.rdbuf();
    CHECK_THAT(text.str(), Catch::Contains("] [dslaunch] [debug] event launching: ") &&
                               Catch::Contains("[debug] event registered of rank 1: ") &&
                               Catch::Contains("[debug] event checkpoint_committed: step 60"));
  }

  // steps_per_print 10 with the breakdown: rank 0 printed steps 10, 20, ...
  const auto logs =
      run_command(fmt::format("DSLAUNCH_HOME='{}' {} logs {} --rank 0 2>&1", dir.string(),
                              runfile("launcher/dslaunch"), job.string()));
  CHECK_THAT(logs.output, Catch::Contains("step 10/60") && Catch::Contains("step 60/60") &&
                              Catch::Contains("| forward ") && !Catch::Contains("step  9/60"));
}

TEST_CASE("wandb is refused, and a monitor folder that cannot be made fails the run") {
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / "monitoring-refused";
  fs::create_directories(dir);
  const auto plan = [&](const std::string& training) {
    const fs::path spec = dir / "job.yaml";
    std::ofstream(spec) << "cluster: {device: cpu}\ndata: {train: demo}\ntraining: {steps: 1, "
                           "train_batch_size: 1, " +
                               training + "}\n";
    return run_command(fmt::format("{} plan {} 2>&1", runfile("launcher/dslaunch"), spec.string()));
  };
  const auto wandb = plan("wandb: {enabled: true, project: x}");
  CHECK(wandb.exit_code == 2);
  CHECK_THAT(wandb.output, Catch::Contains("the wandb monitor") && Catch::Contains("network"));
  CHECK(plan("wandb: {enabled: false}").exit_code == 0);
  const auto amp = plan("amp: {enabled: true, opt_level: O1}");
  CHECK(amp.exit_code == 2);
  CHECK_THAT(amp.output, Catch::Contains("training.amp: DeepSpeed's NVIDIA Apex AMP"));

  { std::ofstream(dir / "blocker") << "a file, not a folder"; }
  const fs::path spec = dir / "blocked.yaml";
  std::ofstream(spec) << fmt::format(
      "cluster: {{device: cpu}}\ndata: {{train: demo}}\ntraining: {{steps: 1, train_batch_size: 1, "
      "tensorboard: "
      "{{enabled: true, output_path: {}}}}}\nenv: {{DSL_DATA_CACHE: '{}'}}\n",
      (dir / "blocker").string(), dir.string());
  const auto blocked = run_command(fmt::format(
      "DSLAUNCH_HOME='{}' DSLAUNCH_WORKER='{}' {} run {} --job-dir {} --progress off 2>&1",
      dir.string(), runfile("worker/dsworker"), runfile("launcher/dslaunch"), spec.string(),
      (dir / "blocked-job").string()));
  CHECK(blocked.exit_code == 2);
  CHECK_THAT(blocked.output, Catch::Contains("tensorboard") && Catch::Contains("blocker"));
}

}  // namespace
