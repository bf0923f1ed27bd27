#pragma once

// The demo corpus: text from generate_demo_text, as llm.c token files with
// one token per byte (vocabulary 256), made on first use so the demo job
// needs no download.

#include <cstdint>
#include <span>
#include <string>

namespace dslaunch::worker::data {

// Part of the file names; raise it whenever the generated content changes,
// so caches made by older builds are not mistaken for the new corpus.
inline constexpr int kDemoCorpusVersion = 1;
inline constexpr int64_t kDemoTrainBytes = 2'000'000;  // at least; whole paragraphs
inline constexpr int64_t kDemoValidBytes = 128 * 1024;
inline constexpr uint64_t kDemoTrainSeed = 1;
inline constexpr uint64_t kDemoValidSeed = 2;

struct DemoCorpus {
  std::string train_path;  // <dir>/demo-v1-train.bin
  std::string valid_path;  // <dir>/demo-v1-valid.bin
  // Entropy of the train split's byte frequencies, in nats: the loss of the
  // best model that ignores context, which a trained model should beat.
  double unigram_entropy_nats = 0;
  std::string error;  // set when the folder or a file cannot be written; the rest is then unset
};

// Generates the corpus in memory (tens of milliseconds), compares it with
// the files in `dir` (created if missing) and rewrites a file that is absent
// or differs in any byte, atomically with a unique temporary name: several
// processes may call this at once for the same folder, since all write the
// same bytes.
DemoCorpus ensure_demo_corpus(const std::string& dir);

// Where the corpus is cached: $DSL_DATA_CACHE if set, else
// $XDG_CACHE_HOME/dslaunch/data, else $HOME/.cache/dslaunch/data; "" when
// none of them is set (empty counts as unset).
std::string default_demo_dir();

// -sum p·ln p over the frequencies p of the distinct tokens; 0 for no tokens.
double unigram_entropy_nats(std::span<const uint16_t> tokens);

}  // namespace dslaunch::worker::data
