#pragma once

// What the multi-rank engine benchmarks share: the demo job's model trained
// on the demo corpus, and how a rank gives up.

#include <cstdlib>
#include <iostream>
#include <string_view>

#include "core/spec/job_spec.h"

namespace dslaunch::bench {

// The demo model (4 layers, 4 heads, 256 channels, a 256-token context, the
// byte vocabulary) on the demo corpus, on CPU, evaluating one batch at the
// end; the caller sets the steps, batch and ZeRO settings.
inline spec::JobSpec demo_training_job() {
  spec::JobSpec spec;
  spec.kind = spec::JobKind::kTrain;
  spec.cluster.device = spec::Device::kCpu;
  spec.model.num_layers = 4;
  spec.model.hidden_size = 256;
  spec.model.num_attention_heads = 4;
  spec.model.vocab_size = 256;
  spec.model.seq_length = 256;
  spec.model.make_vocab_size_divisible_by = 64;
  spec.data.train_on(spec::kDemoData);
  spec.training.eval_batches = 1;
  spec.training.eval_interval = 1000;
  return spec;
}

// Ends this rank at once; mpirun then ends the others, which may be waiting
// in a collective this rank will never start.
[[noreturn]] inline void fail(std::string_view bench, std::string_view message) {
  std::cerr << bench << ": " << message << "\n";
  std::_Exit(1);
}

}  // namespace dslaunch::bench
