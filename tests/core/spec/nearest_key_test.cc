#include "core/spec/nearest_key.h"

#include <catch2/catch.hpp>

using dslaunch::spec::edit_distance;
using dslaunch::spec::nearest_key;

TEST_CASE("edit distance counts insertions, deletions and substitutions") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("trian_batch_size", "train_batch_size") == 2);
  CHECK(edit_distance("Stage", "stage") == 0);
}

TEST_CASE("the nearest key is suggested for a plausible typo") {
  const std::vector<std::string> keys = {"train_batch_size", "train_micro_batch_size_per_gpu",
                                         "gradient_accumulation_steps", "steps"};
  CHECK(nearest_key("trian_batch_size", keys) == "train_batch_size");
  CHECK(nearest_key("step", keys) == "steps");
  CHECK(nearest_key("gradient_accumulation_step", keys) == "gradient_accumulation_steps");
}

TEST_CASE("nothing is suggested when no key is close") {
  CHECK(nearest_key("learning_rate", {"steps", "fp16", "bf16"}).empty());
  CHECK(nearest_key("x", {}).empty());
}
