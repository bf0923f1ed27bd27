#pragma once

#include <cstdint>
#include <string>

namespace dslaunch::worker::data {

// English-like text from a small hand-written grammar, driven by
// std::mt19937_64 (whose output the standard fixes) through our own
// integer-to-choice mapping, so the same seed gives the same bytes with any
// standard library. Paragraphs keep one tense and end in a newline; their
// sentences have subjects, verbs, objects, adjectives, places and times with
// article and number agreement, counts ("three foxes"), sums ("2 and 5 make
// 7") and questions whose answers repeat the subject: structure that a
// small byte-level model learns well below the text's unigram entropy.
// Lowercase ASCII letters, capitals, digits, space, punctuation and '\n'
// only (never NUL). Returns whole paragraphs, at least `min_bytes` bytes.
std::string generate_demo_text(uint64_t seed, int64_t min_bytes);

}  // namespace dslaunch::worker::data
