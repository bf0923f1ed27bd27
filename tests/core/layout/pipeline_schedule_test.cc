#include "core/layout/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

std::string describe(const std::vector<ScheduledPass>& schedule) {
  std::string out;
  for (const ScheduledPass& pass : schedule) {
    out += (pass.kind == PassKind::kForward ? "F" : "B") + std::to_string(pass.chunk) + "." +
           std::to_string(pass.micro_batch) + " ";
  }
  return out;
}

std::vector<ScheduledPass> schedule_of(int64_t micro_batches, int stages, int stage, int chunks) {
  return chunks > 1 ? interleaved_schedule(micro_batches, stages, stage, chunks)
                    : one_f_one_b_schedule(micro_batches, stages, stage);
}

// The pipeline's ranks running their schedules with StageLinks' rules, each
// forward pass of a chunk taking `forward` seconds and each backward
// `backward`: a pass starts once its rank is free, its input (activations
// or gradient) has been sent, and the last send from the buffer it is about
// to rewrite (the slot's output, the chunk's input gradient) has been
// received. Sends and receives take no time. Returns the time each rank
// spent idle over the whole run, or nothing when the ranks deadlock.
std::optional<std::vector<double>> run_pipeline(int64_t micro_batches, int stages, int chunks,
                                                double forward, double backward) {
  const int virtual_stages = stages * chunks;
  std::vector<std::vector<ScheduledPass>> schedules;
  for (int s = 0; s < stages; ++s)
    schedules.push_back(schedule_of(micro_batches, stages, s, chunks));
  // A message: (is a gradient, from virtual stage, micro-batch).
  using Message = std::tuple<bool, int, int64_t>;
  std::map<Message, double> sent;
  std::map<Message, double> received;
  std::map<std::tuple<int, bool, int, int>, Message> last_send;  // (rank, gradient, chunk, slot)
  std::vector<size_t> next(stages, 0);
  std::vector<double> free_at(stages, 0);
  std::vector<double> busy(stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      if (next[s] == schedules[s].size()) continue;
      const ScheduledPass& pass = schedules[s][next[s]];
      const bool is_forward = pass.kind == PassKind::kForward;
      const int v = pass.chunk * stages + s;
      double start = free_at[s];
      const auto reused = last_send.find({s, !is_forward, pass.chunk, is_forward ? pass.slot : 0});
      if (reused != last_send.end()) {
        const auto consumed = received.find(reused->second);
        if (consumed == received.end()) continue;
        start = std::max(start, consumed->second);
      }
      const bool receives = is_forward ? v > 0 : v < virtual_stages - 1;
      const Message input{!is_forward, is_forward ? v - 1 : v + 1, pass.micro_batch};
      if (receives) {
        const auto arrived = sent.find(input);
        if (arrived == sent.end()) continue;
        start = std::max(start, arrived->second);
        received[input] = start;
      }
      const double cost = (is_forward ? forward : backward) / chunks;
      free_at[s] = start + cost;
      busy[s] += cost;
      const bool sends = is_forward ? v < virtual_stages - 1 : v > 0;
      if (sends) {
        const Message output{!is_forward, v, pass.micro_batch};
        sent[output] = free_at[s];
        last_send[{s, !is_forward, pass.chunk, is_forward ? pass.slot : 0}] = output;
      }
      ++next[s];
      progress = true;
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (next[s] != schedules[s].size()) return std::nullopt;
  }
  const double span = *std::max_element(free_at.begin(), free_at.end());
  std::vector<double> idle;
  for (int s = 0; s < stages; ++s) idle.push_back((span - busy[s]) / span);
  return idle;
}

TEST_CASE("1F1B warms up with stages - stage - 1 forwards and cycles stages - stage slots") {
  const std::vector<ScheduledPass> first = one_f_one_b_schedule(6, 3, 0);
  CHECK(describe(first) == "F0.0 F0.1 F0.2 B0.0 F0.3 B0.1 F0.4 B0.2 F0.5 B0.3 B0.4 B0.5 ");
  for (const ScheduledPass& pass : first) CHECK(pass.slot == pass.micro_batch % 3);
  CHECK(schedule_slots(first) == 3);
  CHECK(describe(one_f_one_b_schedule(3, 3, 2)) == "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 ");
  CHECK(schedule_slots(one_f_one_b_schedule(3, 3, 2)) == 1);
  CHECK(describe(accumulation_schedule(2)) == "F0.0 B0.0 F0.1 B0.1 ");
}

TEST_CASE(
    "the interleaved schedule runs Megatron's order: groups of `stages` micro-batches "
    "through each chunk, backward from the last chunk") {
  // Two stages of two chunks, four micro-batches, stage 0: warm-up of
  // (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards.
  CHECK(describe(interleaved_schedule(4, 2, 0, 2)) ==
        "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3 ");
  // Stage 1 warms up with (2 - 1) * 2 = 2 forwards.
  CHECK(describe(interleaved_schedule(4, 2, 1, 2)) ==
        "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3 ");
  // As many micro-batches as stages: every forward first, as Megatron does.
  CHECK(describe(interleaved_schedule(2, 2, 1, 2)) == "F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1 ");
}

TEST_CASE(
    "every schedule runs each chunk's micro-batches once forward, then once backward, in "
    "order, keeping each in its slot until its backward") {
  for (int stages : {2, 3, 4}) {
    for (int chunks : {1, 2, 3}) {
      for (int64_t groups : {1, 2, 3}) {
        const int64_t micro_batches = groups * stages;
        for (int stage = 0; stage < stages; ++stage) {
          const std::vector<ScheduledPass> schedule =
              schedule_of(micro_batches, stages, stage, chunks);
          INFO(stages << " stages, " << chunks << " chunks, " << micro_batches
                      << " micro-batches, stage " << stage << ": " << describe(schedule));
          REQUIRE(schedule.size() == static_cast<size_t>(2 * micro_batches * chunks));
          std::vector<int64_t> forwards(chunks, 0), backwards(chunks, 0);
          std::map<std::pair<int, int64_t>, int> slot_of;
          std::vector<std::set<int>> busy(chunks);
          for (const ScheduledPass& pass : schedule) {
            REQUIRE(pass.chunk >= 0);
            REQUIRE(pass.chunk < chunks);
            if (pass.kind == PassKind::kForward) {
              CHECK(pass.micro_batch == forwards[pass.chunk]++);
              CHECK(busy[pass.chunk].insert(pass.slot).second);
              slot_of[{pass.chunk, pass.micro_batch}] = pass.slot;
            } else {
              CHECK(pass.micro_batch == backwards[pass.chunk]++);
              CHECK(backwards[pass.chunk] <= forwards[pass.chunk]);
              CHECK(slot_of.at({pass.chunk, pass.micro_batch}) == pass.slot);
              busy[pass.chunk].erase(pass.slot);
            }
          }
          for (int c = 0; c < chunks; ++c) {
            CHECK(forwards[c] == micro_batches);
            CHECK(backwards[c] == micro_batches);
            CHECK(schedule_slots(schedule, c) <= micro_batches);
          }
        }
      }
    }
  }
}

TEST_CASE(
    "the stages' schedules never deadlock under the links' rules, and their bubble is the "
    "ideal (p - 1) / (v m + p - 1)") {
  for (int stages : {2, 3, 4}) {
    for (int chunks : {1, 2, 3}) {
      for (int64_t groups : {1, 2, 4}) {
        const int64_t micro_batches = groups * stages;
        INFO(stages << " stages, " << chunks << " chunks, " << micro_batches << " micro-batches");
        const std::optional<std::vector<double>> idle =
            run_pipeline(micro_batches, stages, chunks, 1.0, 2.0);
        REQUIRE(idle.has_value());
        const double ideal = static_cast<double>(stages - 1) /
                             static_cast<double>(chunks * micro_batches + stages - 1);
        for (const double fraction : *idle) CHECK(fraction == Approx(ideal).margin(1e-12));
      }
    }
  }
}

}  // namespace
}  // namespace dslaunch::core
