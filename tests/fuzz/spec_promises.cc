#include "tests/fuzz/spec_promises.h"

#include "tests/fuzz/fuzz_support.h"

namespace dslaunch::fuzz {

void check_accepted_spec(const spec::JobSpec& spec) {
  const auto& model = spec.model;
  const auto& parallel = spec.parallelism;
  require(parallel.tensor >= 1 && parallel.pipeline >= 1);
  require(model.num_attention_heads % parallel.tensor == 0);
  require(model.hidden_size % parallel.tensor == 0);
  require(model.hidden_size % model.num_attention_heads == 0);
  require(model.num_layers % parallel.pipeline == 0);
  require(spec.training.steps >= 1);
  require(spec.training.zero.stage >= 0 && spec.training.zero.stage <= 3);
  require(!(spec.training.fp16.enabled && spec.training.bf16));
  require(spec.fault_tolerance.heartbeat_timeout_s > spec.fault_tolerance.heartbeat_interval_s);
  require(!spec.data.train.empty());
}

}  // namespace dslaunch::fuzz
