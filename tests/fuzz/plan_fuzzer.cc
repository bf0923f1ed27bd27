// libFuzzer target: the planner (make_plan) on fuzzed job specs that the
// spec parser accepts, with a fuzzed hostfile beside the spec (`hostfile:
// hostfile`) and, at times, a fuzzed Slurm allocation (SLURM_JOB_NODELIST,
// SLURM_TASKS_PER_NODE), on a fixed 8-core CPU machine. Besides crashes,
// hangs and sanitizer reports, it traps when a promise is broken: a plan is
// made exactly when no error is reported; the world size is the hosts'
// slots, divisible by tensor x pipeline, and the grid's shape is tensor x
// data x pipeline; every rank is placed once, at its grid coordinates, on a
// slot of a planned host that no other rank holds; a training job's batch
// is micro batch x accumulation x data parallel and its memory is estimated
// for every pipeline stage.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <utility>

#include "launcher/plan/job_plan.h"
#include "core/spec/spec_parser.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using dslaunch::fuzz::require;
namespace plan = dslaunch::plan;
namespace spec = dslaunch::spec;

void check_plan(const spec::JobSpec& job, const plan::JobPlan& planned) {
  int64_t world = 0;
  for (const auto& host : planned.hosts) world += static_cast<int64_t>(host.slots.size());
  const auto& shape = planned.grid.shape();
  require(world == planned.world_size());
  require(shape.tensor == job.parallelism.tensor && shape.pipeline == job.parallelism.pipeline);
  require(int64_t{shape.tensor} * shape.pipeline * shape.data == world);
  require(static_cast<int64_t>(planned.placement.ranks.size()) == world);
  require(planned.placement.errors.empty());

  std::set<std::pair<std::string, int>> taken;
  for (int rank = 0; rank < planned.world_size(); ++rank) {
    const auto& placed = planned.placement.ranks[static_cast<size_t>(rank)];
    require(placed.rank == rank && placed.coord == planned.grid.coord_of(rank));
    require(placed.local_rank >= 0 && placed.local_rank < placed.local_world_size);
    bool on_a_slot = false;
    for (const auto& host : planned.hosts) {
      on_a_slot |= host.host == placed.host &&
                   std::find(host.slots.begin(), host.slots.end(), placed.slot) != host.slots.end();
    }
    require(on_a_slot && taken.emplace(placed.host, placed.slot).second);
  }

  if (job.kind != spec::JobKind::kTrain) return;
  const auto& batch = planned.batch;
  require(batch.micro_batch_per_gpu > 0 && batch.gradient_accumulation_steps > 0);
  require(batch.train_batch_size ==
          batch.micro_batch_per_gpu * batch.gradient_accumulation_steps * shape.data);
  require(static_cast<int>(planned.memory_by_stage.size()) == shape.pipeline);
  require(planned.padded_vocab_size >= job.model.vocab_size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  const bool in_slurm = input.ConsumeBool();
  const std::string nodelist = input.ConsumeRandomLengthString(64);
  const std::string tasks = input.ConsumeRandomLengthString(32);
  const std::string hostfile = input.ConsumeRandomLengthString(512);
  const std::string yaml = input.ConsumeRemainingBytesAsString();

  dslaunch::fuzz::clear_scratch_dir();
  dslaunch::fuzz::write_scratch_file("hostfile", hostfile);
  spec::Diagnostics diagnostics;
  spec::SourceMap locations;
  const spec::JobSpec job = spec::parse_job_spec(yaml, dslaunch::fuzz::scratch_dir() + "/spec.yaml",
                                                 {}, diagnostics, locations);
  if (diagnostics.has_errors()) return 0;

  plan::PlanInputs inputs;
  inputs.machine.cores = 8;
  inputs.machine.numa_nodes = 2;
  inputs.machine.memory_bytes = int64_t{64} << 30;
  inputs.getenv = [&](const char* name) -> const char* {
    if (!in_slurm) return nullptr;
    if (std::strcmp(name, "SLURM_JOB_NODELIST") == 0) return nodelist.c_str();
    if (std::strcmp(name, "SLURM_TASKS_PER_NODE") == 0) return tasks.c_str();
    return nullptr;
  };
  const auto planned = plan::make_plan(job, locations, inputs, diagnostics);
  require(planned.has_value() == !diagnostics.has_errors());
  if (planned) check_plan(job, *planned);
  return 0;
}
