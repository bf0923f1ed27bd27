#include "launcher/controller/job_state.h"

#include <atomic>
#include <csignal>
#include <thread>

#include <catch2/catch.hpp>

#include "launcher/controller/clock.h"

namespace dslaunch::controller {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A clock the test moves by hand.
class FakeClock final : public Clock {
 public:
  TimePoint now() const override { return TimePoint{} + milliseconds(now_ms_.load()); }
  void advance(milliseconds by) { now_ms_ += by.count(); }

 private:
  std::atomic<int64_t> now_ms_{1'000'000};
};

FailureTimeouts timeouts() {
  FailureTimeouts result;
  result.heartbeat_timeout = seconds(60);
  result.checkpoint_timeout = seconds(600);
  return result;
}

v1::Heartbeat heartbeat(int64_t step, v1::Phase phase = v1::PHASE_TRAIN) {
  v1::Heartbeat result;
  result.set_step(step);
  result.set_loss(10.0 / static_cast<double>(step + 1));
  result.set_phase(phase);
  return result;
}

// A started job whose `world` ranks have all registered, rank r on
// node0<r / 2 + 1> with pid 100 + r.
struct RunningJob {
  explicit RunningJob(int world, FailureTimeouts limits = timeouts())
      : state(world, limits, clock) {
    state.start();
    for (int rank = 0; rank < world; ++rank) {
      REQUIRE(state.on_register(rank, "node0" + std::to_string(rank / 2 + 1), 100 + rank, "cpu"));
    }
    REQUIRE(state.phase() == JobPhase::kRunning);
  }
  FakeClock clock;
  JobState state;
};

}  // namespace

TEST_CASE("phases are named as status shows them, and three are final") {
  CHECK(std::string(to_string(JobPhase::kPending)) == "PENDING");
  CHECK(std::string(to_string(JobPhase::kStarting)) == "STARTING");
  CHECK(std::string(to_string(JobPhase::kRunning)) == "RUNNING");
  CHECK(std::string(to_string(JobPhase::kSucceeded)) == "SUCCEEDED");
  CHECK(std::string(to_string(JobPhase::kFailed)) == "FAILED");
  CHECK(std::string(to_string(JobPhase::kStopped)) == "STOPPED");
  CHECK(std::string(to_string(RankPhase::kStarting)) == "starting");
  CHECK(std::string(to_string(RankPhase::kRunning)) == "running");
  CHECK(std::string(to_string(RankPhase::kLost)) == "lost");
  CHECK(std::string(to_string(RankPhase::kExited)) == "exited");
  CHECK_FALSE(is_final(JobPhase::kPending));
  CHECK_FALSE(is_final(JobPhase::kStarting));
  CHECK_FALSE(is_final(JobPhase::kRunning));
  CHECK(is_final(JobPhase::kSucceeded));
  CHECK(is_final(JobPhase::kFailed));
  CHECK(is_final(JobPhase::kStopped));
}

TEST_CASE("a new job is pending with every rank starting, and start makes it STARTING") {
  FakeClock clock;
  JobState state(3, timeouts(), clock);
  CHECK(state.phase() == JobPhase::kPending);
  CHECK_FALSE(state.stop_requested());
  CHECK_FALSE(state.root_cause());
  const auto ranks = state.ranks();
  REQUIRE(ranks.size() == 3);
  for (int rank = 0; rank < 3; ++rank) {
    CHECK(ranks[rank].rank == rank);
    CHECK(ranks[rank].phase == RankPhase::kStarting);
    CHECK(ranks[rank].pid == 0);
  }
  state.start();
  CHECK(state.phase() == JobPhase::kStarting);
  state.start();
  CHECK(state.phase() == JobPhase::kStarting);
}

TEST_CASE("registration records the rank and the job is RUNNING once every rank registered") {
  FakeClock clock;
  JobState state(2, timeouts(), clock);
  state.start();
  clock.advance(seconds(3));
  REQUIRE(state.on_register(1, "node01", 4121, "cuda:1"));
  CHECK(state.phase() == JobPhase::kStarting);
  const RankRecord one = state.ranks()[1];
  CHECK(one.phase == RankPhase::kRunning);
  CHECK(one.host == "node01");
  CHECK(one.pid == 4121);
  CHECK(one.device == "cuda:1");
  CHECK(one.last_heartbeat == clock.now());
  CHECK(state.ranks()[0].phase == RankPhase::kStarting);

  REQUIRE(state.on_register(0, "node01", 4120, "cuda:0"));
  CHECK(state.phase() == JobPhase::kRunning);
}

TEST_CASE("registration may complete before start is called") {
  FakeClock clock;
  JobState state(1, timeouts(), clock);
  REQUIRE(state.on_register(0, "localhost", 7, "cpu"));
  CHECK(state.phase() == JobPhase::kRunning);
  state.start();
  CHECK(state.phase() == JobPhase::kRunning);
}

TEST_CASE("a rank outside the world or registered twice is refused and changes nothing") {
  FakeClock clock;
  JobState state(2, timeouts(), clock);
  state.start();
  CHECK_FALSE(state.on_register(-1, "node01", 1, "cpu"));
  CHECK_FALSE(state.on_register(2, "node01", 1, "cpu"));
  REQUIRE(state.on_register(0, "node01", 10, "cpu"));
  clock.advance(seconds(5));
  CHECK_FALSE(state.on_register(0, "node02", 20, "cuda:0"));
  const RankRecord zero = state.ranks()[0];
  CHECK(zero.host == "node01");
  CHECK(zero.pid == 10);
  CHECK(zero.device == "cpu");
  CHECK(zero.last_heartbeat == clock.now() - seconds(5));
  CHECK(state.phase() == JobPhase::kStarting);
}

TEST_CASE("a rank whose process ended, or any rank of a final job, cannot register") {
  FakeClock clock;
  JobState state(3, timeouts(), clock);
  state.start();
  state.on_rank_exit(0, 0, std::nullopt, "");
  CHECK_FALSE(state.on_register(0, "node01", 10, "cpu"));
  CHECK(state.ranks()[0].phase == RankPhase::kExited);
  state.mark_failed("mpirun exited with code 1");
  CHECK_FALSE(state.on_register(1, "node01", 11, "cpu"));
  CHECK(state.ranks()[1].phase == RankPhase::kStarting);
}

TEST_CASE("heartbeats of registered ranks are kept, others are ignored") {
  FakeClock clock;
  JobState state(2, timeouts(), clock);
  state.start();
  REQUIRE(state.on_register(0, "node01", 10, "cpu"));
  clock.advance(seconds(5));
  state.on_heartbeat(0, heartbeat(7));
  state.on_heartbeat(1, heartbeat(9));  // not registered
  state.on_heartbeat(5, heartbeat(9));  // not in the world
  const auto ranks = state.ranks();
  CHECK(ranks[0].heartbeat.step() == 7);
  CHECK(ranks[0].heartbeat.phase() == v1::PHASE_TRAIN);
  CHECK(ranks[0].last_heartbeat == clock.now());
  CHECK(ranks[1].heartbeat.step() == 0);
  CHECK(ranks[1].last_heartbeat == Clock::TimePoint{});
}

TEST_CASE("the latest heartbeat is that of the rank furthest ahead") {
  RunningJob job(3);
  CHECK(job.state.latest_heartbeat().step() == 0);
  job.state.on_heartbeat(0, heartbeat(4));
  job.state.on_heartbeat(1, heartbeat(6));
  job.state.on_heartbeat(2, heartbeat(5));
  const v1::Heartbeat latest = job.state.latest_heartbeat();
  CHECK(latest.step() == 6);
  CHECK(latest.loss() == 10.0 / 7.0);
}

TEST_CASE("the job SUCCEEDED once every rank exited with code 0") {
  RunningJob job(3);
  job.state.on_rank_exit(2, 0, std::nullopt, "");
  job.state.on_rank_exit(0, 0, std::nullopt, "");
  CHECK(job.state.phase() == JobPhase::kRunning);
  CHECK(job.state.ranks()[0].phase == RankPhase::kExited);
  CHECK(job.state.ranks()[1].phase == RankPhase::kRunning);
  job.state.on_rank_exit(1, 0, std::nullopt, "");
  CHECK(job.state.phase() == JobPhase::kSucceeded);
  CHECK_FALSE(job.state.root_cause());
  for (const RankRecord& rank : job.state.ranks()) {
    CHECK(rank.phase == RankPhase::kExited);
    CHECK(rank.exit_code == 0);
    CHECK_FALSE(rank.exit_signal);
  }
}

TEST_CASE("a non-zero exit fails the job with that rank, its code and stderr as root cause") {
  RunningJob job(4);
  job.state.on_rank_exit(1, 3, std::nullopt, "loading data\nno such file: train.bin\n");
  CHECK(job.state.phase() == JobPhase::kFailed);
  const auto cause = job.state.root_cause();
  REQUIRE(cause);
  CHECK(cause->rank == 1);
  CHECK(cause->host == "node01");
  CHECK(cause->pid == 101);
  CHECK(cause->exit_code == 3);
  CHECK_FALSE(cause->exit_signal);
  CHECK_FALSE(cause->hung);
  CHECK(cause->message == "loading data\nno such file: train.bin\n");
  CHECK(cause->to_string() ==
        "rank 1 (node01, pid 101) exited with code 3: no such file: train.bin");
  const RankRecord one = job.state.ranks()[1];
  CHECK(one.phase == RankPhase::kExited);
  CHECK(one.exit_code == 3);
}

TEST_CASE("a rank killed by a signal fails the job with the signal as root cause") {
  RunningJob job(4);
  job.state.on_rank_exit(3, std::nullopt, SIGKILL, "");
  CHECK(job.state.phase() == JobPhase::kFailed);
  const auto cause = job.state.root_cause();
  REQUIRE(cause);
  CHECK(cause->rank == 3);
  CHECK(cause->exit_signal == SIGKILL);
  CHECK_FALSE(cause->exit_code);
  CHECK(cause->to_string() == "rank 3 (node02, pid 103) was killed by signal 9 (Killed)");
  CHECK(job.state.ranks()[3].exit_signal == SIGKILL);
}

TEST_CASE("an error event fails the job with the rank's own message") {
  RunningJob job(2);
  job.state.on_error_event(0, "CUDA error: out of memory\n  at matmul (kernels.cu:42)");
  CHECK(job.state.phase() == JobPhase::kFailed);
  const auto cause = job.state.root_cause();
  REQUIRE(cause);
  CHECK(cause->rank == 0);
  CHECK_FALSE(cause->exit_code);
  CHECK_FALSE(cause->exit_signal);
  CHECK(cause->to_string() ==
        "rank 0 (node01, pid 100) reported an error: CUDA error: out of memory");
  // The rank exits after its report; that is recorded, not a new cause.
  job.state.on_rank_exit(0, 1, std::nullopt, "");
  CHECK(job.state.root_cause()->exit_code == std::nullopt);
  CHECK(job.state.ranks()[0].exit_code == 1);
}

TEST_CASE("the first failure in time stays the root cause and later exits are still recorded") {
  RunningJob job(4);
  job.state.on_rank_exit(2, std::nullopt, SIGSEGV, "");
  job.state.on_rank_exit(0, 1, std::nullopt, "ncclInternalError");
  job.state.on_error_event(1, "peer closed the connection");
  job.state.mark_failed("the launcher failed");
  job.clock.advance(seconds(3600));
  CHECK(job.state.check_heartbeats().empty());
  job.state.on_rank_exit(1, std::nullopt, SIGTERM, "");
  job.state.on_rank_exit(3, std::nullopt, SIGKILL, "");
  job.state.mark_stopped();

  CHECK(job.state.phase() == JobPhase::kFailed);
  const auto cause = job.state.root_cause();
  REQUIRE(cause);
  CHECK(cause->rank == 2);
  CHECK(cause->to_string() ==
        "rank 2 (node02, pid 102) was killed by signal 11 (Segmentation fault)");
  const auto ranks = job.state.ranks();
  CHECK(ranks[0].exit_code == 1);
  CHECK(ranks[1].exit_signal == SIGTERM);
  CHECK(ranks[3].exit_signal == SIGKILL);
  for (const RankRecord& rank : ranks) CHECK(rank.phase == RankPhase::kExited);
}

TEST_CASE("after a stop request our SIGTERM and SIGKILL are no failure and the job is STOPPED") {
  RunningJob job(3);
  job.state.request_stop();
  CHECK(job.state.stop_requested());
  job.state.on_rank_exit(0, 0, std::nullopt, "");
  job.state.on_rank_exit(1, std::nullopt, SIGTERM, "");
  CHECK(job.state.phase() == JobPhase::kRunning);
  job.state.on_rank_exit(2, std::nullopt, SIGKILL, "");
  CHECK(job.state.phase() == JobPhase::kStopped);
  CHECK_FALSE(job.state.root_cause());
  CHECK(job.state.ranks()[1].exit_signal == SIGTERM);
}

TEST_CASE("after a stop request ranks that all exit 0 leave the job STOPPED, not SUCCEEDED") {
  RunningJob job(2);
  job.state.request_stop();
  job.state.on_rank_exit(0, 0, std::nullopt, "");
  job.state.on_rank_exit(1, 0, std::nullopt, "");
  CHECK(job.state.phase() == JobPhase::kStopped);
}

TEST_CASE("after a stop request a non-zero exit or another signal is still a failure") {
  SECTION("exit code") {
    RunningJob job(2);
    job.state.request_stop();
    job.state.on_rank_exit(1, 2, std::nullopt, "checkpoint write failed: No space left on device");
    CHECK(job.state.phase() == JobPhase::kFailed);
    CHECK(job.state.root_cause()->to_string() ==
          "rank 1 (node01, pid 101) exited with code 2: checkpoint write failed: No space left on "
          "device");
  }
  SECTION("signal") {
    RunningJob job(2);
    job.state.request_stop();
    job.state.on_rank_exit(0, std::nullopt, SIGABRT,
                           "terminate called without an active exception");
    CHECK(job.state.phase() == JobPhase::kFailed);
    CHECK(job.state.root_cause()->to_string() ==
          "rank 0 (node01, pid 100) was killed by signal 6 (Aborted): terminate called without an "
          "active exception");
  }
}

TEST_CASE("SIGTERM without a stop request is a failure (preemption, scancel)") {
  RunningJob job(2);
  job.state.on_rank_exit(1, std::nullopt, SIGTERM, "");
  CHECK(job.state.phase() == JobPhase::kFailed);
  CHECK(job.state.root_cause()->to_string() ==
        "rank 1 (node01, pid 101) was killed by signal 15 (Terminated)");
}

TEST_CASE("a failure before the stop request keeps the job FAILED") {
  RunningJob job(2);
  job.state.on_rank_exit(0, std::nullopt, SIGKILL, "");
  job.state.request_stop();
  CHECK_FALSE(job.state.stop_requested());
  job.state.on_rank_exit(1, std::nullopt, SIGTERM, "");
  CHECK(job.state.phase() == JobPhase::kFailed);
  CHECK(job.state.root_cause()->rank == 0);
}

TEST_CASE("mark_stopped ends a running job as STOPPED") {
  RunningJob job(2);
  job.state.request_stop();
  job.state.mark_stopped();
  CHECK(job.state.phase() == JobPhase::kStopped);
  // The ranks' deaths that follow are recorded; nothing else changes.
  job.state.on_rank_exit(0, std::nullopt, SIGKILL, "");
  job.state.on_rank_exit(1, 1, std::nullopt, "");
  CHECK(job.state.phase() == JobPhase::kStopped);
  CHECK_FALSE(job.state.root_cause());
  CHECK(job.state.ranks()[1].exit_code == 1);
}

TEST_CASE("mark_failed fails a job that has no rank to blame") {
  FakeClock clock;
  JobState state(2, timeouts(), clock);
  state.start();
  state.mark_failed("mpirun not found on PATH");
  CHECK(state.phase() == JobPhase::kFailed);
  const auto cause = state.root_cause();
  REQUIRE(cause);
  CHECK(cause->rank == -1);
  CHECK(cause->to_string() == "mpirun not found on PATH");
}

TEST_CASE("a final phase never changes") {
  RunningJob job(2);
  job.state.on_rank_exit(0, 0, std::nullopt, "");
  job.state.on_rank_exit(1, 0, std::nullopt, "");
  REQUIRE(job.state.phase() == JobPhase::kSucceeded);
  job.state.on_error_event(0, "late");
  job.state.mark_failed("late");
  job.state.mark_stopped();
  job.state.request_stop();
  job.state.start();
  job.clock.advance(seconds(3600));
  CHECK(job.state.check_heartbeats().empty());
  CHECK(job.state.phase() == JobPhase::kSucceeded);
  CHECK_FALSE(job.state.root_cause());
  CHECK_FALSE(job.state.stop_requested());
}

TEST_CASE("a second exit of the same rank is ignored") {
  RunningJob job(2);
  job.state.on_rank_exit(0, 0, std::nullopt, "");
  job.state.on_rank_exit(0, 1, std::nullopt, "");
  CHECK(job.state.phase() == JobPhase::kRunning);
  CHECK(job.state.ranks()[0].exit_code == 0);
  job.state.on_rank_exit(7, 1, std::nullopt, "");  // not in the world
  CHECK(job.state.phase() == JobPhase::kRunning);
}

TEST_CASE("an exit with neither code nor signal counts as code -1") {
  RunningJob job(1);
  job.state.on_rank_exit(0, std::nullopt, std::nullopt, "");
  CHECK(job.state.phase() == JobPhase::kFailed);
  CHECK(job.state.root_cause()->to_string() == "rank 0 (node01, pid 100) exited with code -1");
}

TEST_CASE("a rank that dies before it registers is named without host or pid") {
  FakeClock clock;
  JobState state(6, timeouts(), clock);
  state.start();
  state.on_rank_exit(5, 127, std::nullopt, "dsworker: command not found\n");
  CHECK(state.phase() == JobPhase::kFailed);
  CHECK(state.root_cause()->to_string() ==
        "rank 5 exited with code 127: dsworker: command not found");
}

TEST_CASE("a rank silent for longer than the heartbeat timeout is lost and fails the job as hung") {
  RunningJob job(4);
  job.clock.advance(seconds(30));
  for (int rank : {0, 1, 3}) job.state.on_heartbeat(rank, heartbeat(1));
  job.clock.advance(seconds(30));
  CHECK(job.state.check_heartbeats().empty());  // rank 2: exactly 60 s is not longer
  job.clock.advance(milliseconds(1));
  CHECK(job.state.check_heartbeats() == std::vector<int>{2});
  CHECK(job.state.phase() == JobPhase::kFailed);
  const auto cause = job.state.root_cause();
  REQUIRE(cause);
  CHECK(cause->rank == 2);
  CHECK(cause->hung);
  CHECK(cause->silence_allowed == seconds(60));
  CHECK_FALSE(cause->in_checkpoint);
  CHECK(cause->to_string() == "rank 2 (node02, pid 102) sent no heartbeat for 60s (hung?)");
  CHECK(job.state.ranks()[2].phase == RankPhase::kLost);
  // The job is final: later silence loses no one else.
  job.clock.advance(seconds(3600));
  CHECK(job.state.check_heartbeats().empty());
  CHECK(job.state.ranks()[0].phase == RankPhase::kRunning);
  // Killing the lost rank is recorded on it; the cause stays "hung".
  job.state.on_rank_exit(2, std::nullopt, SIGKILL, "");
  CHECK(job.state.ranks()[2].phase == RankPhase::kExited);
  CHECK(job.state.root_cause()->hung);
}

TEST_CASE("regular heartbeats keep a rank alive") {
  RunningJob job(1);
  for (int beat = 1; beat <= 100; ++beat) {
    job.clock.advance(seconds(59));
    job.state.on_heartbeat(0, heartbeat(beat));
    CHECK(job.state.check_heartbeats().empty());
  }
  CHECK(job.state.phase() == JobPhase::kRunning);
}

TEST_CASE("a rank writing a checkpoint may stay silent for the checkpoint timeout") {
  RunningJob job(2);
  job.state.on_heartbeat(1, heartbeat(100, v1::PHASE_CHECKPOINT));
  job.clock.advance(seconds(59));
  job.state.on_heartbeat(0, heartbeat(100, v1::PHASE_CHECKPOINT));
  job.clock.advance(seconds(541));
  CHECK(job.state.check_heartbeats().empty());  // rank 1: 600 s exactly
  job.state.on_heartbeat(1, heartbeat(101, v1::PHASE_TRAIN));
  job.clock.advance(seconds(59));
  CHECK(job.state.check_heartbeats().empty());  // rank 0 at 600 s, rank 1 at 59 s
  job.clock.advance(milliseconds(1001));
  CHECK(job.state.check_heartbeats() == std::vector<int>{0, 1});
  // Rank 0's deadline (59 + 600 s) passed before rank 1's (600 + 60 s).
  const auto cause = job.state.root_cause();
  REQUIRE(cause);
  CHECK(cause->rank == 0);
  CHECK(cause->in_checkpoint);
  CHECK(cause->to_string() ==
        "rank 0 (node01, pid 100) sent no heartbeat for 600s while writing a checkpoint (hung?)");
}

TEST_CASE("ranks lost in one check: the one past its deadline first is the root cause") {
  RunningJob job(3);
  job.clock.advance(seconds(10));
  job.state.on_heartbeat(0, heartbeat(1));
  job.state.on_heartbeat(1, heartbeat(1));
  job.clock.advance(seconds(5));
  job.state.on_heartbeat(0, heartbeat(2));
  job.clock.advance(seconds(100));
  CHECK(job.state.check_heartbeats() == std::vector<int>{0, 1, 2});
  CHECK(job.state.root_cause()->rank == 2);  // silent since registration
}

TEST_CASE("ranks that never registered are not lost by heartbeat") {
  FakeClock clock;
  JobState state(2, timeouts(), clock);
  state.start();
  REQUIRE(state.on_register(0, "node01", 10, "cpu"));
  clock.advance(seconds(59));
  state.on_heartbeat(0, heartbeat(1));
  clock.advance(seconds(3600 - 59));
  CHECK(state.check_heartbeats() == std::vector<int>{0});
  CHECK(state.ranks()[1].phase == RankPhase::kStarting);
  CHECK(state.root_cause()->rank == 0);
}

TEST_CASE("a fractional timeout is shown in seconds") {
  FailureTimeouts limits;
  limits.heartbeat_timeout = milliseconds(1500);
  RunningJob job(1, limits);
  job.clock.advance(milliseconds(1501));
  CHECK(job.state.check_heartbeats() == std::vector<int>{0});
  CHECK(job.state.root_cause()->to_string() ==
        "rank 0 (node01, pid 100) sent no heartbeat for 1.5s (hung?)");
}

TEST_CASE("heartbeats from many threads while another checks are all taken") {
  constexpr int kWorld = 8;
  constexpr int kBeats = 5000;
  RunningJob job(kWorld);
  std::atomic<bool> done{false};
  std::atomic<int> checks{0};
  std::atomic<int> lost{0};
  // Catch2's assertions are not thread-safe: the threads count, the test checks.
  // do-while: on a loaded machine the senders may finish before this
  // thread first runs, and it must check at least once.
  std::thread checker([&] {
    do {
      lost += static_cast<int>(job.state.check_heartbeats().size());
      (void)job.state.ranks();
      (void)job.state.latest_heartbeat();
      ++checks;
    } while (!done);
  });
  std::vector<std::thread> senders;
  for (int rank = 0; rank < kWorld; ++rank) {
    senders.emplace_back([&job, rank] {
      for (int beat = 1; beat <= kBeats; ++beat) {
        job.state.on_heartbeat(rank, heartbeat(beat * kWorld + rank));
      }
    });
  }
  for (std::thread& sender : senders) sender.join();
  done = true;
  checker.join();

  CHECK(checks > 0);
  CHECK(lost == 0);
  CHECK(job.state.phase() == JobPhase::kRunning);
  CHECK(job.state.latest_heartbeat().step() == kBeats * kWorld + kWorld - 1);
  for (const RankRecord& rank : job.state.ranks()) {
    CHECK(rank.heartbeat.step() == kBeats * kWorld + rank.rank);
    CHECK(rank.phase == RankPhase::kRunning);
  }
  job.clock.advance(seconds(61));
  CHECK(job.state.check_heartbeats().size() == kWorld);
}

FailureTimeouts with_step_timeout(seconds step_timeout) {
  FailureTimeouts result = timeouts();
  result.step_timeout = step_timeout;
  return result;
}

// Heartbeats every `every` for `total`, all at `step` (and `phase`), with a
// step-progress check after each; false once a check fails the job.
bool beat_without_progress(RunningJob& job, int rank, int64_t step, seconds every, seconds total,
                           v1::Phase phase = v1::PHASE_TRAIN) {
  for (seconds elapsed{0}; elapsed < total; elapsed += every) {
    job.clock.advance(every);
    job.state.on_heartbeat(rank, heartbeat(step, phase));
    if (job.state.check_step_progress()) return false;
  }
  return true;
}

TEST_CASE("a heartbeating rank stuck at one step fails the job as hung at the step timeout") {
  RunningJob job(2, with_step_timeout(seconds(30)));
  job.state.on_heartbeat(0, heartbeat(7));
  job.state.on_heartbeat(1, heartbeat(7));
  for (int beat = 0; beat < 30; ++beat) {
    job.clock.advance(seconds(1));
    job.state.on_heartbeat(0, heartbeat(8 + beat));  // rank 0 goes on
    job.state.on_heartbeat(1, heartbeat(7));         // rank 1 does not
    CHECK(job.state.check_heartbeats().empty());
    CHECK_FALSE(job.state.check_step_progress());  // exactly 30 s is not longer
  }
  job.clock.advance(milliseconds(1));
  CHECK(job.state.check_step_progress() == 1);
  CHECK(job.state.phase() == JobPhase::kFailed);
  const auto cause = job.state.root_cause();
  REQUIRE(cause);
  CHECK(cause->rank == 1);
  CHECK(cause->hung);
  CHECK(cause->stuck_at_step == 7);
  CHECK(cause->silence_allowed == seconds(30));
  CHECK(cause->to_string() ==
        "rank 1 (node01, pid 101) made no step progress for 30s: stuck at step 7 (hung?)");
  CHECK_FALSE(job.state.check_step_progress());  // final: reported once
}

TEST_CASE("each new step restarts a rank's step timeout") {
  RunningJob job(1, with_step_timeout(seconds(30)));
  for (int64_t step = 1; step <= 50; ++step) {
    job.state.on_heartbeat(0, heartbeat(step));
    REQUIRE(beat_without_progress(job, 0, step, seconds(5), seconds(30)));
  }
  CHECK(job.state.phase() == JobPhase::kRunning);
}

TEST_CASE("no step timeout while a rank writes a checkpoint, nor once it finished") {
  RunningJob job(2, with_step_timeout(seconds(30)));
  job.state.on_heartbeat(0, heartbeat(20));
  job.state.on_heartbeat(1, heartbeat(20, v1::PHASE_FINISHED));
  CHECK(beat_without_progress(job, 0, 20, seconds(10), seconds(300), v1::PHASE_CHECKPOINT));
  // Back to training, the clock starts from its last checkpoint heartbeat.
  CHECK(beat_without_progress(job, 0, 20, seconds(10), seconds(30)));
  CHECK_FALSE(beat_without_progress(job, 0, 20, seconds(10), seconds(10)));
  CHECK(job.state.root_cause()->rank == 0);
}

TEST_CASE("before its first step a rank may take the longer of the step and checkpoint timeouts") {
  RunningJob job(1, with_step_timeout(seconds(30)));
  // Starting (reading a checkpoint, say) since registration: 600 s allowed.
  CHECK(beat_without_progress(job, 0, 0, seconds(10), seconds(600), v1::PHASE_INIT));
  job.clock.advance(milliseconds(1));
  CHECK(job.state.check_step_progress() == 0);
  const auto cause = job.state.root_cause();
  REQUIRE(cause);
  CHECK(cause->stuck_at_step == 0);
  CHECK(cause->to_string() ==
        "rank 0 (node01, pid 100) made no step progress for 600s: it never began its first step "
        "(hung?)");
}

TEST_CASE("a step timeout of 0 never fires") {
  RunningJob job(1);
  job.state.on_heartbeat(0, heartbeat(3));
  CHECK(beat_without_progress(job, 0, 3, seconds(50), seconds(7 * 24 * 3600)));
}

namespace {

v1::Heartbeat heartbeat_with(int64_t step, const std::vector<std::pair<std::string, int64_t>>& started) {
  v1::Heartbeat result = heartbeat(step);
  for (const auto& [group, count] : started) {
    v1::GroupProgress* progress = result.add_collectives();
    progress->set_group(group);
    progress->set_started(count);
  }
  return result;
}

v1::HungCollective hung_in(const std::string& group, int64_t sequence, std::vector<int> members) {
  v1::HungCollective result;
  result.set_group(group);
  result.set_sequence(sequence);
  for (const int member : members) result.add_world_ranks(member);
  return result;
}

}  // namespace

TEST_CASE("a collective past its timeout fails the job as hung, naming the members that never "
          "started it") {
  RunningJob job(4);
  // Data groups {0, 2} and {1, 3}; rank 2 is behind on its data/gradients
  // group, rank 3 (another group, the same name) is not a member.
  job.state.on_heartbeat(0, heartbeat_with(9, {{"world", 4}, {"data/gradients", 212}}));
  job.state.on_heartbeat(1, heartbeat_with(9, {{"world", 4}, {"data/gradients", 200}}));
  job.state.on_heartbeat(2, heartbeat_with(9, {{"world", 4}, {"data/gradients", 211}}));
  job.state.on_heartbeat(3, heartbeat_with(9, {{"world", 4}, {"data/gradients", 150}}));
  const std::string report =
      "data/gradients reduce_scatter #212 of 3.8 MiB over world ranks 0, 2 did not complete "
      "within 600 s";
  job.state.on_hang_event(0, report, hung_in("data/gradients", 212, {0, 2}));
  CHECK(job.state.phase() == JobPhase::kFailed);
  const auto cause = job.state.root_cause();
  REQUIRE(cause);
  CHECK(cause->rank == 0);
  CHECK(cause->hung);
  CHECK(cause->in_collective);
  CHECK(cause->to_string() ==
        "rank 0 (node01, pid 100) waited in a collective past fault_tolerance.collective_timeout "
        "(hung?): " +
            report + "; never started by rank 2 (its last was #211)");
  // A second report (rank 2 is killed, another member times out) changes nothing.
  job.state.on_hang_event(2, "other", hung_in("data/gradients", 212, {0, 2}));
  CHECK(job.state.root_cause()->rank == 0);
}

TEST_CASE("a hang report names no laggard when every member's heartbeat shows the collective "
          "started, or none carries the group") {
  RunningJob job(2);
  job.state.on_heartbeat(0, heartbeat_with(3, {{"data", 8}}));
  job.state.on_heartbeat(1, heartbeat_with(3, {{"data", 8}}));
  job.state.on_hang_event(1, "data all_gather #8 of 64 B over world ranks 0, 1 did not complete "
                             "within 5 s",
                          hung_in("data", 8, {0, 1}));
  const auto cause = job.state.root_cause();
  REQUIRE(cause);
  CHECK(cause->to_string() ==
        "rank 1 (node01, pid 101) waited in a collective past fault_tolerance.collective_timeout "
        "(hung?): data all_gather #8 of 64 B over world ranks 0, 1 did not complete within 5 s");

  RunningJob other(2);
  other.state.on_hang_event(0, "world barrier #1 of 0 B over world ranks 0, 1 did not complete",
                            hung_in("world", 1, {0, 1, 7}));  // 7: outside the world, ignored
  REQUIRE(other.state.root_cause());
  CHECK_THAT(other.state.root_cause()->to_string(), !Catch::Contains("never started"));
}

}  // namespace dslaunch::controller
