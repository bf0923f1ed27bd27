#pragma once

// The tests' independent GPT-2 BPE: gpt2_bpe_reference.py (OpenAI's
// encoder.py with Python's `regex` module) run as a process, and the texts
// that the tests encode with it.

#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/temp_files.h"

namespace dslaunch::tools::testing {

// The files gpt2_bpe_reference.py's trainer writes: one vocabulary, three ways.
struct ReferenceVocabulary {
  std::string vocab;                 // vocab.json
  std::string merges;                // merges.txt, with a "#version" first line
  std::string tokenizer_json;        // tokenizer.json, merges as "left right"
  std::string tokenizer_pairs_json;  // tokenizer.json, merges as [left, right]
};

// Trains up to `merge_count` merges over training_text() into files in `dir`;
// fails the test on error.
ReferenceVocabulary train_reference_vocabulary(const dslaunch::testing::TempDir& dir,
                                               int merge_count);

// encoder.py's tokens for each of `texts` (valid UTF-8) with the vocabulary;
// fails the test on error.
std::vector<std::vector<int32_t>> reference_encode(const dslaunch::testing::TempDir& dir,
                                                   const ReferenceVocabulary& vocabulary,
                                                   const std::vector<std::string>& texts);

// English with contractions, accents, CJK, emoji, digits, punctuation and
// runs of white space, so that the merges cover each kind.
std::string training_text();

// Texts to compare encodings on: training_text(), a sample that mixes
// everything (lowercase contractions and the uppercase 'S that GPT-2 does
// not treat as one, multiple spaces, tabs, newlines, trailing spaces, Unicode
// white space), and short edge cases.
std::vector<std::string> test_texts();

}  // namespace dslaunch::tools::testing
