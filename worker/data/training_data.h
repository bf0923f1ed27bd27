#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/spec/job_spec.h"
#include "worker/data/token_source.h"

namespace dslaunch::worker::data {

// The token data of a job: the sources it opened and the ranges to train
// and evaluate on. Movable; the ranges point into the owned sources.
struct TrainingData {
  std::vector<std::unique_ptr<TokenSource>> sources;
  // One range per dataset of data.train, drawn from by `weights`.
  std::vector<TokenRange> train;
  std::vector<double> weights;
  TokenRange valid;
  std::optional<double> unigram_entropy_nats;  // the demo corpus's train split; else unset
  std::string error;  // set when a source cannot be opened or is too small; the rest is unset

  int64_t train_tokens() const;
};

// Opens what the job spec's data section names:
//   data.train  each dataset's files (glob patterns matched in sorted
//               order), read one after the other as open_token_source reads
//               data.format; or "demo": the demo corpus, made in `demo_dir`
//               if needed (see ensure_demo_corpus);
//   data.valid  the same, one after the other; empty = the demo corpus's
//               valid file for "demo", otherwise the last 3% of each
//               training dataset (see split_held_out), one after the other.
// Every range holds at least one window of seq_len + 1 tokens.
// Precondition: seq_len >= 1.
TrainingData open_training_data(const spec::DataSpec& data, int64_t seq_len,
                                const std::string& demo_dir);

}  // namespace dslaunch::worker::data
