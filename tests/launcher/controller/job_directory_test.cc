#include "launcher/controller/job_directory.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>

#include "core/faulty_file_system.h"

namespace dslaunch::controller {
namespace {

namespace fs = std::filesystem;

// A fresh, empty folder under $TEST_TMPDIR for one test.
std::string fresh_folder(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path folder = fs::path(tmp ? tmp : "/tmp") / "job_directory_test" / name;
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder.string();
}

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream content;
  content << file.rdbuf();
  return content.str();
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

mode_t mode_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

JobDirectory make_job(const std::string& test_name) {
  std::string error;
  auto job = JobDirectory::create(fresh_folder(test_name), "demo-20240102-030405-00ff", error);
  REQUIRE(job);
  CHECK(error.empty());
  return *job;
}

// Sets an environment variable for one scope and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string local_stamp(std::time_t when) {
  std::tm local{};
  ::localtime_r(&when, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  return stamp;
}

}  // namespace

TEST_CASE("jobs live under $DSLAUNCH_HOME/jobs, else ~/.dslaunch/jobs") {
  {
    ScopedEnv home("HOME", "/home/ada");
    ScopedEnv dslaunch_home("DSLAUNCH_HOME", "/scratch/ada/dslaunch/");
    CHECK(default_jobs_root() == "/scratch/ada/dslaunch/jobs");
  }
  {
    ScopedEnv home("HOME", "/home/ada");
    ScopedEnv dslaunch_home("DSLAUNCH_HOME", nullptr);
    CHECK(default_jobs_root() == "/home/ada/.dslaunch/jobs");
  }
  {
    ScopedEnv home("HOME", "/home/ada");
    ScopedEnv dslaunch_home("DSLAUNCH_HOME", "");
    CHECK(default_jobs_root() == "/home/ada/.dslaunch/jobs");
  }
}

TEST_CASE("a job id is the name, the local start time and 4 random hex digits") {
  const std::time_t before = std::time(nullptr);
  const std::string id = new_job_id("gpt2-small");
  const std::time_t after = std::time(nullptr);
  CHECK(std::regex_match(id, std::regex("gpt2-small-[0-9]{8}-[0-9]{6}-[0-9a-f]{4}")));
  const std::string stamp = id.substr(std::string("gpt2-small-").size(), 15);
  CHECK((stamp == local_stamp(before) || stamp == local_stamp(after)));

  std::set<std::string> suffixes;
  for (int i = 0; i < 20; ++i) suffixes.insert(new_job_id("x").substr(18));
  CHECK(suffixes.size() > 1);
}

TEST_CASE("create makes the root and a job folder only its owner can enter") {
  const std::string folder = fresh_folder("create");
  const std::string root = folder + "/home/.dslaunch/jobs";
  std::string error;
  const auto job = JobDirectory::create(root, "demo-20240102-030405-00ff", error);
  REQUIRE(job);
  CHECK(error.empty());
  CHECK(job->path() == root + "/demo-20240102-030405-00ff");
  CHECK(job->job_id() == "demo-20240102-030405-00ff");
  CHECK(fs::is_directory(job->path()));
  CHECK(mode_of(job->path()) == 0700);
  // The folders made on the way are private too.
  CHECK(mode_of(root) == 0700);
  CHECK(mode_of(folder + "/home") == 0700);
}

TEST_CASE("create reuses an existing job folder with its files") {
  const std::string root = fresh_folder("reuse");
  std::string error;
  const auto first = JobDirectory::create(root + "/", "resumed", error);
  REQUIRE(first);
  CHECK(first->path() == root + "/resumed");
  write_file(first->path() + "/events.jsonl", "old\n");
  const auto second = JobDirectory::create(root, "resumed", error);
  REQUIRE(second);
  CHECK(second->path() == first->path());
  CHECK(read_file(second->path() + "/events.jsonl") == "old\n");
}

TEST_CASE("create refuses a job id that is not one folder name") {
  const std::string root = fresh_folder("bad_id");
  for (const char* id : {"", ".", "..", "a/b"}) {
    std::string error;
    CHECK_FALSE(JobDirectory::create(root, id, error));
    CHECK(error == "invalid job id '" + std::string(id) + "': it must be a single folder name");
  }
}

TEST_CASE("create under a root that is a file says which path is not a folder") {
  const std::string root = fresh_folder("root_is_file") + "/jobs";
  write_file(root, "not a folder");
  std::string error;
  CHECK_FALSE(JobDirectory::create(root, "demo", error));
  CHECK(error == "cannot create folder '" + root + "': Not a directory");
  CHECK_FALSE(JobDirectory::create(root + "/deeper/still", "demo", error));
  CHECK(error == "cannot create folder '" + root + "': Not a directory");
}

TEST_CASE("create where folders cannot be made names the path and the reason") {
  if (::geteuid() != 0) {
    const std::string root = fresh_folder("no_permission");
    REQUIRE(::chmod(root.c_str(), 0500) == 0);
    std::string error;
    CHECK_FALSE(JobDirectory::create(root, "demo", error));
    CHECK(error == "cannot create job folder '" + root + "/demo': Permission denied");
    ::chmod(root.c_str(), 0700);
  }
  // Even root may not make folders in sysfs.
  std::string error;
  CHECK_FALSE(JobDirectory::create("/sys/dslaunch-test/jobs", "demo", error));
  CHECK(error.rfind("cannot create folder '/sys/dslaunch-test': ", 0) == 0);
}

TEST_CASE("open finds an existing job folder and refuses anything else") {
  const std::string root = fresh_folder("open");
  std::string error;
  const auto job = JobDirectory::open(root + "/", error);
  REQUIRE(job);
  CHECK(job->path() == root);
  CHECK(job->job_id() == "open");

  CHECK_FALSE(JobDirectory::open(root + "/missing", error));
  CHECK(error == "cannot open job folder '" + root + "/missing': No such file or directory");
  write_file(root + "/file", "");
  CHECK_FALSE(JobDirectory::open(root + "/file", error));
  CHECK(error == "cannot open job folder '" + root + "/file': Not a directory");
}

TEST_CASE("the state is written as pretty JSON with a newline and read back") {
  JobDirectory job = make_job("state");
  std::string error;
  const nlohmann::json state = {{"phase", "RUNNING"}, {"ranks", {1, 2}}};
  REQUIRE(job.write_state(state, error));
  CHECK(read_file(job.path() + "/state.json") ==
        "{\n  \"phase\": \"RUNNING\",\n  \"ranks\": [\n    1,\n    2\n  ]\n}\n");
  CHECK_FALSE(fs::exists(job.path() + "/state.json.tmp"));
  CHECK(mode_of(job.path() + "/state.json") == 0600);
  const auto read = job.read_state(error);
  REQUIRE(read);
  CHECK(*read == state);

  REQUIRE(job.write_state({{"phase", "SUCCEEDED"}}, error));
  CHECK(read_file(job.path() + "/state.json") == "{\n  \"phase\": \"SUCCEEDED\"\n}\n");
}

TEST_CASE("a state.json nested past the depth cap is an error, not a crash") {
  JobDirectory job = make_job("deep_state");
  write_file(job.path() + "/state.json", std::string(100000, '['));
  std::string error;
  CHECK_FALSE(job.read_state(error));
  CHECK(error == "cannot parse '" + job.path() +
                     "/state.json': arrays and objects nest deeper than 64 levels");
}

TEST_CASE("a stale temporary state file from a crash is replaced") {
  JobDirectory job = make_job("stale_tmp");
  write_file(job.path() + "/state.json.tmp", "{\"phase\": \"RUNN");
  std::string error;
  REQUIRE(job.write_state({{"phase", "RUNNING"}}, error));
  CHECK(read_file(job.path() + "/state.json") == "{\n  \"phase\": \"RUNNING\"\n}\n");
  CHECK_FALSE(fs::exists(job.path() + "/state.json.tmp"));
}

TEST_CASE("a failed state write says why and leaves the previous state.json intact") {
  JobDirectory job = make_job("state_fails");
  std::string error;
  REQUIRE(job.write_state({{"phase", "STARTING"}}, error));
  const std::string before = read_file(job.path() + "/state.json");

  SECTION("the temporary file's name is taken by a folder") {
    fs::create_directory(job.path() + "/state.json.tmp");
    CHECK_FALSE(job.write_state({{"phase", "RUNNING"}}, error));
    CHECK(error == "cannot remove stale '" + job.path() + "/state.json.tmp': Is a directory");
  }
  SECTION("the disk takes only part of the file") {
    // RLIMIT_FSIZE cuts the write short after 16 bytes, as a full disk would.
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit old_limit{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    rlimit small = old_limit;
    small.rlim_cur = 16;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    const bool written = job.write_state({{"phase", "RUNNING"}, {"step", 12345}}, error);
    ::setrlimit(RLIMIT_FSIZE, &old_limit);
    CHECK_FALSE(written);
    CHECK(error == "cannot write '" + job.path() + "/state.json.tmp': File too large");
    CHECK_FALSE(fs::exists(job.path() + "/state.json.tmp"));
  }
  SECTION("the disk is full") {
    core::FaultyFileSystem faulty;
    faulty.fail(core::FileCall::kWrite, 1, ENOSPC);
    auto failing = JobDirectory::open(job.path(), error, faulty);
    REQUIRE(failing);
    CHECK_FALSE(failing->write_state({{"phase", "RUNNING"}}, error));
    CHECK(error == "cannot write '" + job.path() + "/state.json.tmp': No space left on device");
    CHECK_FALSE(fs::exists(job.path() + "/state.json.tmp"));
  }
  SECTION("fsync fails") {
    core::FaultyFileSystem faulty;
    faulty.fail(core::FileCall::kSync, 1, EIO);
    auto failing = JobDirectory::open(job.path(), error, faulty);
    REQUIRE(failing);
    CHECK_FALSE(failing->write_state({{"phase", "RUNNING"}}, error));
    CHECK(error == "cannot write '" + job.path() + "/state.json.tmp': Input/output error");
    CHECK_FALSE(fs::exists(job.path() + "/state.json.tmp"));
  }
  CHECK(read_file(job.path() + "/state.json") == before);
  const auto read = job.read_state(error);
  REQUIRE(read);
  CHECK(*read == nlohmann::json{{"phase", "STARTING"}});
}

TEST_CASE("a state written before a power cut is the one there after it") {
  JobDirectory job = make_job("state_power_cut");
  std::string error;
  REQUIRE(job.write_state({{"phase", "STARTING"}}, error));
  core::FaultyFileSystem faulty;
  auto job_on_faulty = JobDirectory::open(job.path(), error, faulty);
  REQUIRE(job_on_faulty);
  REQUIRE(job_on_faulty->write_state({{"phase", "RUNNING"}}, error));
  faulty.crash_before(core::FileCall::kSyncFolder, 2);
  CHECK_FALSE(job_on_faulty->write_state({{"phase", "SUCCEEDED"}}, error));
  faulty.power_cut();
  CHECK(job.read_state(error) == nlohmann::json{{"phase", "RUNNING"}});
  CHECK_FALSE(fs::exists(job.path() + "/state.json.tmp"));
}

TEST_CASE("reading a missing or broken state names the file") {
  JobDirectory job = make_job("read_state");
  std::string error;
  CHECK_FALSE(job.read_state(error));
  CHECK(error == "cannot read '" + job.path() + "/state.json': No such file or directory");
  write_file(job.path() + "/state.json", "{\"phase\": ");
  CHECK_FALSE(job.read_state(error));
  CHECK(error.rfind(
            "cannot parse '" + job.path() + "/state.json': [json.exception.parse_error.101]", 0) ==
        0);
}

TEST_CASE("events are appended one JSON line each, with time, rank, kind and detail") {
  JobDirectory job = make_job("events");
  std::string error;
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  REQUIRE(job.append_event(-1, "state", "RUNNING", error));
  REQUIRE(job.append_event(3, "exit", "killed by signal 9 (Killed)", error));
  REQUIRE(job.append_event(0, "error", "line one\n\"quoted\"", error));
  CHECK(mode_of(job.path() + "/events.jsonl") == 0600);
  const double after =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

  std::istringstream lines(read_file(job.path() + "/events.jsonl"));
  std::vector<std::string> rests;
  std::string line;
  while (std::getline(lines, line)) {
    // {"time":1712345678.123,"rank":...}: seconds with at most millisecond digits.
    std::smatch match;
    REQUIRE(std::regex_match(line, match, std::regex(R"(\{"time":([0-9]+(\.[0-9]{1,3})?),(.*))")));
    const double time = std::stod(match[1].str());
    CHECK(time >= before - 0.001);
    CHECK(time <= after);
    rests.push_back(match[3].str());
  }
  CHECK(rests == std::vector<std::string>{
                     R"json("rank":null,"kind":"state","detail":"RUNNING"})json",
                     R"json("rank":3,"kind":"exit","detail":"killed by signal 9 (Killed)"})json",
                     R"json("rank":0,"kind":"error","detail":"line one\n\"quoted\""})json",
                 });
}

TEST_CASE("bytes that are not UTF-8 in an event are replaced, never thrown") {
  JobDirectory job = make_job("events_utf8");
  std::string error;
  REQUIRE(job.append_event(1, "stderr", "bad \xff byte", error));
  const std::string content = read_file(job.path() + "/events.jsonl");
  CHECK(content.find(R"("detail":"bad )"
                     "\xef\xbf\xbd"
                     R"( byte"})") != std::string::npos);
}

TEST_CASE("metrics are appended as compact JSON lines, visible as soon as the call returns") {
  const std::string root = fresh_folder("metrics");
  std::string error;
  auto job = JobDirectory::create(root, "job", error);
  REQUIRE(job);
  REQUIRE(job->append_metrics({{"step", 1}, {"loss", 2.5}}, error));
  CHECK(read_file(job->path() + "/metrics.jsonl") == "{\"loss\":2.5,\"step\":1}\n");
  // A second writer (a resumed controller) appends, never truncates.
  auto again = JobDirectory::open(job->path(), error);
  REQUIRE(again);
  REQUIRE(again->append_metrics({{"step", 2}, {"loss", 2.25}, {"tokens_per_s", 1000}}, error));
  CHECK(read_file(job->path() + "/metrics.jsonl") ==
        "{\"loss\":2.5,\"step\":1}\n{\"loss\":2.25,\"step\":2,\"tokens_per_s\":1000}\n");
}

TEST_CASE("appending to a full disk reports ENOSPC with the file's name") {
  JobDirectory job = make_job("full_disk");
  fs::create_symlink("/dev/full", job.path() + "/events.jsonl");
  fs::create_symlink("/dev/full", job.path() + "/metrics.jsonl");
  std::string error;
  CHECK_FALSE(job.append_event(0, "state", "RUNNING", error));
  CHECK(error == "cannot append to '" + job.path() + "/events.jsonl': No space left on device");
  CHECK_FALSE(job.append_metrics({{"step", 1}}, error));
  CHECK(error == "cannot append to '" + job.path() + "/metrics.jsonl': No space left on device");
}

TEST_CASE("the spec is written as given") {
  JobDirectory job = make_job("spec");
  std::string error;
  REQUIRE(job.write_spec("name: demo\ncluster:\n  device: cpu\n", error));
  CHECK(read_file(job.path() + "/spec.yaml") == "name: demo\ncluster:\n  device: cpu\n");
  CHECK(mode_of(job.path() + "/spec.yaml") == 0600);
}

TEST_CASE("the token is private to its owner whatever the umask, and replaced on rewrite") {
  JobDirectory job = make_job("token");
  const std::string path = job.path() + "/token";
  write_file(path, "old-token");
  ::chmod(path.c_str(), 0644);
  const mode_t old_umask = ::umask(0);
  std::string error;
  const bool written = job.write_token("3f9c0a1b2c3d4e5f", error);
  ::umask(old_umask);
  REQUIRE(written);
  CHECK(read_file(path) == "3f9c0a1b2c3d4e5f");
  CHECK(mode_of(path) == 0600);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  CHECK(job.read_token(error) == std::optional<std::string>("3f9c0a1b2c3d4e5f"));
}

TEST_CASE("reading a missing or empty token says so, and a final newline is not part of it") {
  JobDirectory job = make_job("read_token");
  const std::string path = job.path() + "/token";
  std::string error;
  CHECK_FALSE(job.read_token(error));
  CHECK(error == "cannot read '" + path + "': No such file or directory");
  write_file(path, "\n");
  CHECK_FALSE(job.read_token(error));
  CHECK(error == "token file '" + path + "' is empty");
  write_file(path, "abc123\n");
  CHECK(job.read_token(error) == std::optional<std::string>("abc123"));
}

TEST_CASE("a rank's log is under its attempt and rank, made private with its folders") {
  JobDirectory job = make_job("logs");
  std::string error;
  const std::string path = job.rank_log_path(2, 13, "stderr", error);
  CHECK(path == job.path() + "/logs/attempt_2/rank_13/stderr.log");
  for (const char* folder : {"/logs", "/logs/attempt_2", "/logs/attempt_2/rank_13"}) {
    CHECK(mode_of(job.path() + folder) == 0700);
  }
  CHECK(mode_of(path) == 0600);
  CHECK(read_file(path).empty());
  CHECK(job.rank_log_path(2, 13, "stdout", error) ==
        job.path() + "/logs/attempt_2/rank_13/stdout.log");
  // A log already there keeps its lines.
  write_file(path, "line\n");
  CHECK(job.rank_log_path(2, 13, "stderr", error) == path);
  CHECK(read_file(path) == "line\n");
}

TEST_CASE("a log path for a bad stream or an unmakeable folder is empty with an error") {
  JobDirectory job = make_job("logs_bad");
  std::string error;
  CHECK(job.rank_log_path(0, 0, "stdin", error).empty());
  CHECK(error == "no log for attempt 0, rank 0, stream 'stdin' (stdout or stderr)");
  CHECK(job.rank_log_path(-1, 0, "stdout", error).empty());
  CHECK(error == "no log for attempt -1, rank 0, stream 'stdout' (stdout or stderr)");
  write_file(job.path() + "/logs", "");
  CHECK(job.rank_log_path(0, 0, "stdout", error).empty());
  CHECK(error == "cannot create folder '" + job.path() + "/logs': Not a directory");
}

TEST_CASE("job folders are the root's subfolders with a state.json, sorted by name") {
  const std::string root = fresh_folder("list");
  std::string error;
  for (const char* id : {"demo-20240102-030405-beef", "demo-20240101-000000-0001",
                         "bert-20250101-000000-aaaa", "starting-no-state"}) {
    auto job = JobDirectory::create(root, id, error);
    REQUIRE(job);
    if (std::string(id) != "starting-no-state") REQUIRE(job->write_state({{"phase", "X"}}, error));
  }
  write_file(root + "/state.json", "{}");
  fs::create_directories(root + "/odd/state.json");  // a folder, not a file
  CHECK(list_job_dirs(root) == std::vector<std::string>{
                                   root + "/bert-20250101-000000-aaaa",
                                   root + "/demo-20240101-000000-0001",
                                   root + "/demo-20240102-030405-beef",
                               });
  CHECK(list_job_dirs(root + "/") == list_job_dirs(root));
  CHECK(list_job_dirs(root + "/missing").empty());
  CHECK(list_job_dirs(root + "/state.json").empty());
}

}  // namespace dslaunch::controller
