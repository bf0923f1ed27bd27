#include "worker/engine/lr_schedule.h"

#include <cstdint>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

using dslaunch::spec::SchedulerSpec;
using dslaunch::spec::SchedulerType;
using dslaunch::spec::WarmupType;
using dslaunch::worker::engine::learning_rate;

namespace {

// (step, lr that step uses)
using Expected = std::vector<std::pair<int64_t, double>>;

// The expected rates below come from DeepSpeed's own lr_schedules.py
// (microsoft/DeepSpeed, deepspeed/runtime/lr_schedules.py, 2025-02): the
// scheduler built on a torch optimizer with last_batch_iteration = -1, the lr
// of param_groups[0] read before each optimizer step, scheduler.step() called
// after it, as DeepSpeed's engine does. Written with Python's repr, which
// round-trips, and compared exactly: learning_rate() does DeepSpeed's
// operations in DeepSpeed's order.
void check_rates(const SchedulerSpec& scheduler, double base_lr, const Expected& expected) {
  for (const auto& [step, lr] : expected) {
    INFO("step " << step);
    CHECK(learning_rate(scheduler, base_lr, step) == lr);
  }
}

}  // namespace

TEST_CASE("no scheduler keeps the optimizer's lr") {
  const SchedulerSpec none;
  for (int64_t step : {0, 1, 7, 1'000'000}) CHECK(learning_rate(none, 3e-4, step) == 3e-4);
}

TEST_CASE("WarmupLR, log warmup: min + (max - min) * ln(i + 1) / ln(W), i = step - 1") {
  SchedulerSpec scheduler;
  scheduler.type = SchedulerType::kWarmupLR;
  scheduler.warmup_min_lr = 1e-4;
  scheduler.warmup_max_lr = 1e-3;
  scheduler.warmup_num_steps = 10;
  scheduler.warmup_type = WarmupType::kLog;
  // Step 0 runs before the scheduler's first step(): warmup_min_lr. Step 1 has
  // i = 0, ln(1) = 0: warmup_min_lr again. Step 11 on: warmup_max_lr.
  check_rates(scheduler, 0.5,
              {{0, 0.0001},
               {1, 0.0001},
               {2, 0.000370926996097583},   // 1e-4 + 9e-4 * ln 2 / ln 10
               {3, 0.0005294091292476961},  // 1e-4 + 9e-4 * ln 3 / ln 10
               {5, 0.0007290730039024168},
               {9, 0.0009588182584953923},
               {10, 0.0009999999999999998},  // ln 10 / ln 10, rounded
               {11, 0.001},
               {12, 0.001},
               {100, 0.001}});
}

TEST_CASE("WarmupLR, linear warmup: min + (max - min) * i / W") {
  SchedulerSpec scheduler;
  scheduler.type = SchedulerType::kWarmupLR;
  scheduler.warmup_min_lr = 0.0;
  scheduler.warmup_max_lr = 0.01;
  scheduler.warmup_num_steps = 4;
  scheduler.warmup_type = WarmupType::kLinear;
  check_rates(
      scheduler, 0.5,
      {{0, 0.0}, {1, 0.0}, {2, 0.0025}, {3, 0.005}, {4, 0.0075}, {5, 0.01}, {6, 0.01}, {50, 0.01}});
}

TEST_CASE("WarmupLR clamps the warmup to 2 steps, as DeepSpeed does") {
  SchedulerSpec scheduler;
  scheduler.type = SchedulerType::kWarmupLR;
  scheduler.warmup_min_lr = 0.001;
  scheduler.warmup_max_lr = 0.002;
  scheduler.warmup_num_steps = 0;
  scheduler.warmup_type = WarmupType::kLog;
  check_rates(scheduler, 0.5, {{0, 0.001}, {1, 0.001}, {2, 0.002}, {3, 0.002}, {4, 0.002}});
}

TEST_CASE("WarmupDecayLR, log warmup then min + (max - min) * max(0, (total - i) / (total - W))") {
  SchedulerSpec scheduler;
  scheduler.type = SchedulerType::kWarmupDecayLR;
  scheduler.warmup_min_lr = 0.0;
  scheduler.warmup_max_lr = 1e-3;
  scheduler.warmup_num_steps = 5;
  scheduler.total_num_steps = 20;
  scheduler.warmup_type = WarmupType::kLog;
  check_rates(scheduler, 0.5,
              {{0, 0.0},
               {1, 0.0},
               {2, 0.00043067655807339306},  // 1e-3 * ln 2 / ln 5
               {3, 0.0006826061944859854},   // 1e-3 * ln 3 / ln 5
               {5, 0.001},                   // i = 4: ln 5 / ln 5
               {6, 0.001},                   // i = 5: (20 - 5) / 15
               {7, 0.0009333333333333333},   // (20 - 6) / 15
               {10, 0.0007333333333333333},  // (20 - 9) / 15
               {20, 6.666666666666667e-05},  // (20 - 19) / 15
               {21, 0.0},                    // i = total: decayed to warmup_min_lr
               {22, 0.0},
               {30, 0.0}});
}

TEST_CASE("WarmupDecayLR, linear warmup, decays to warmup_min_lr") {
  SchedulerSpec scheduler;
  scheduler.type = SchedulerType::kWarmupDecayLR;
  scheduler.warmup_min_lr = 1e-5;
  scheduler.warmup_max_lr = 1e-3;
  scheduler.warmup_num_steps = 5;
  scheduler.total_num_steps = 20;
  scheduler.warmup_type = WarmupType::kLinear;
  check_rates(scheduler, 0.5,
              {{0, 1e-05},
               {1, 1e-05},
               {2, 0.00020800000000000001},  // 1e-5 + 9.9e-4 * 1 / 5
               {3, 0.00040600000000000006},
               {5, 0.0008020000000000001},  // i = 4: 4 / 5, the last warmup step
               {6, 0.001},
               {7, 0.000934},
               {10, 0.000736},
               {20, 7.6e-05},
               {21, 1e-05},
               {22, 1e-05},
               {30, 1e-05}});
}

TEST_CASE("WarmupCosineLR: base_lr times the warmup ratio, then the cosine ratio") {
  SchedulerSpec scheduler;
  scheduler.type = SchedulerType::kWarmupCosineLR;
  scheduler.warmup_min_ratio = 0.1;
  scheduler.cos_min_ratio = 0.01;
  scheduler.warmup_num_steps = 5;
  scheduler.total_num_steps = 25;
  // Past warmup the ratio is cos_min + (1 - cos_min) * (1 + cos(pi * k / K)) / 2
  // with k = i - W + 1, K = total - W; it is not clamped past total, so the
  // rate rises again there, as in DeepSpeed.
  const Expected cosine = {{6, 0.0019878114571891866},    // k = 1, K = 20
                           {7, 0.0019515459511322021},    // k = 2
                           {15, 0.00101},                 // k = 10: cos(pi / 2) = 0
                           {25, 2e-05},                   // k = 20: cos_min_ratio
                           {26, 3.2188542810813615e-05},  // k = 21
                           {30, 0.00030996428662531786},
                           {40, 0.001710035713374682}};

  SECTION("log warmup") {
    scheduler.warmup_type = WarmupType::kLog;
    check_rates(scheduler, 0.002,
                {{0, 0.0},     // DeepSpeed's rate before the first scheduler step is 0
                 {1, 0.0002},  // i = 0: warmup_min_ratio
                 {2, 0.0009752178045321076},  // 0.002 * (0.1 + 0.9 * ln 2 / ln 5)
                 {3, 0.0014286911500747737},
                 {5, 0.002}});
    check_rates(scheduler, 0.002, cosine);
  }
  SECTION("linear warmup") {
    scheduler.warmup_type = WarmupType::kLinear;
    check_rates(scheduler, 0.002,
                {{0, 0.0},
                 {1, 0.0002},
                 {2, 0.0005600000000000001},  // 0.002 * (0.1 + 0.9 * 1 / 5)
                 {3, 0.0009200000000000001},
                 {5, 0.0016400000000000002}});  // i = 4: 4 / 5
    check_rates(scheduler, 0.002, cosine);
  }
}

TEST_CASE("WarmupCosineLR with no decay steps holds cos_min_ratio after warmup") {
  // total == W: DeepSpeed divides by zero here; dslaunch keeps the final ratio.
  SchedulerSpec scheduler;
  scheduler.type = SchedulerType::kWarmupCosineLR;
  scheduler.warmup_min_ratio = 0.0;
  scheduler.cos_min_ratio = 0.25;
  scheduler.warmup_num_steps = 4;
  scheduler.total_num_steps = 4;
  scheduler.warmup_type = WarmupType::kLinear;
  CHECK(learning_rate(scheduler, 0.5, 4) == 0.5 * 3.0 / 4.0);
  CHECK(learning_rate(scheduler, 0.5, 5) == 0.5 * 0.25);
  CHECK(learning_rate(scheduler, 0.5, 9) == 0.5 * 0.25);
}
