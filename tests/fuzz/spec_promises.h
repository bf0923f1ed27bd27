#pragma once

#include "core/spec/job_spec.h"

namespace dslaunch::fuzz {

// Traps unless a spec the parser accepted without errors keeps the promises
// later stages rely on: parallel sizes that divide the model, a step count,
// a ZeRO stage, one precision, heartbeat timings, training data.
void check_accepted_spec(const spec::JobSpec& spec);

}  // namespace dslaunch::fuzz
