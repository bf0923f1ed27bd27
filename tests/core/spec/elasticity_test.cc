#include "core/spec/elasticity.h"

#include <catch2/catch.hpp>

// Expected values are DeepSpeed's (tests/unit/elasticity/test_elastic.py)
// or come from a transcription of deepspeed/elasticity/elasticity.py run
// with the same inputs.

namespace dslaunch::spec {
namespace {

// DeepSpeed's test fixture: version 0.1, 32 to 1500 GPUs.
ElasticitySpec deepspeed_fixture() {
  ElasticitySpec spec;
  spec.enabled = true;
  spec.max_train_batch_size = 10000;
  spec.micro_batch_sizes = {8, 12, 16, 17};
  spec.min_gpus = 32;
  spec.max_gpus = 1500;
  spec.min_time = 20;
  spec.version = 0.1;
  return spec;
}

ElasticitySpec version_02(ElasticitySpec spec, int num_gpus_per_node, int model_parallel_size) {
  spec.version = 0.2;
  spec.num_gpus_per_node = num_gpus_per_node;
  spec.model_parallel_size = model_parallel_size;
  return spec;
}

// The fixture's batch suits these 23 data-parallel sizes.
const std::vector<int64_t> kFixtureSizes = {32,  34,  36,  48,  51,  64,  68,  72,
                                            96,  102, 136, 144, 153, 192, 204, 272,
                                            288, 306, 408, 576, 612, 816, 1224};

void check_sizes(const ElasticBatchResult& result, int64_t train, int64_t micro, int64_t gas) {
  INFO(result.error);
  REQUIRE(result.sizes);
  CHECK(result.error.empty());
  CHECK(result.sizes->train_batch_size == train);
  CHECK(result.sizes->micro_batch_per_gpu == micro);
  CHECK(result.sizes->gradient_accumulation_steps == gas);
}

}  // namespace

TEST_CASE("version 0.1: DeepSpeed's 10k example gives 9792 for 23 sizes") {
  const ElasticBatchResult result = elastic_batch(deepspeed_fixture(), 64, 1);
  CHECK(result.final_batch == 9792);
  CHECK(result.valid_data_parallel_sizes == kFixtureSizes);
  // As DeepSpeed's test checks: every size splits the batch into whole
  // micro batches of one of the sizes.
  for (const int64_t size : result.valid_data_parallel_sizes) {
    CHECK(9792 % size == 0);
    const int64_t share = 9792 / size;
    CHECK((share % 8 == 0 || share % 12 == 0 || share % 16 == 0 || share % 17 == 0));
  }
  // test_valid_world_size: 64 ranks take micro batch 17 (9792 / 64 = 153 = 9 x 17).
  check_sizes(result, 9792, 17, 9);
}

TEST_CASE("version 0.1: the micro batch is the largest that divides a replica's share") {
  // 9792 / 48 = 204: 17 and 12 divide it, 16 does not.
  check_sizes(elastic_batch(deepspeed_fixture(), 48, 1), 9792, 17, 12);
  // 9792 / 576 = 17.
  check_sizes(elastic_batch(deepspeed_fixture(), 576, 1), 9792, 17, 1);
  // 9792 / 1224 = 8.
  check_sizes(elastic_batch(deepspeed_fixture(), 1224, 1), 9792, 8, 1);
}

TEST_CASE("version 0.1: the least common multiple may exceed max_train_batch_size") {
  // DeepSpeed's test_proper_mbsz: lcm(1, 2, 3, 7) = 42 >= 32 is a candidate
  // as it is, and suits the most sizes.
  ElasticitySpec spec = deepspeed_fixture();
  spec.max_train_batch_size = 32;
  spec.micro_batch_sizes = {1, 2, 3, 7};
  spec.min_gpus = 1;
  const ElasticBatchResult result = elastic_batch(spec, 7, 1);
  CHECK(result.final_batch == 42);
  CHECK(result.valid_data_parallel_sizes == std::vector<int64_t>{1, 2, 3, 6, 7, 14, 21, 42});
  check_sizes(result, 42, 3, 2);
}

TEST_CASE("version 0.1: data-parallel size is the world over tensor x pipeline") {
  // 128 ranks in groups of 2 are 64 replicas.
  check_sizes(elastic_batch(deepspeed_fixture(), 128, 2), 9792, 17, 9);
}

TEST_CASE("version 0.1: a tie in sizes goes to the larger batch, or the smaller") {
  ElasticitySpec spec;
  spec.enabled = true;
  spec.version = 0.1;
  spec.max_train_batch_size = 16;
  spec.micro_batch_sizes = {2, 4};
  // Candidates 16 (sizes 1, 2, 4, 8) and 12 (1, 2, 3, 6).
  const ElasticBatchResult larger = elastic_batch(spec, 2, 1);
  CHECK(larger.valid_data_parallel_sizes == std::vector<int64_t>{1, 2, 4, 8});
  check_sizes(larger, 16, 4, 2);
  spec.prefer_larger_batch = false;
  const ElasticBatchResult smaller = elastic_batch(spec, 2, 1);
  CHECK(smaller.valid_data_parallel_sizes == std::vector<int64_t>{1, 2, 3, 6});
  check_sizes(smaller, 12, 2, 3);
}

TEST_CASE("version 0.1: past the highly composite numbers, the last one scales the base") {
  ElasticitySpec spec;
  spec.enabled = true;
  spec.version = 0.1;
  spec.max_train_batch_size = 2'000'000;
  spec.micro_batch_sizes = {1};
  const ElasticBatchResult result = elastic_batch(spec, 1, 1);
  CHECK(result.final_batch == 720720);
  CHECK(result.valid_data_parallel_sizes.size() == 198);  // divisors of 720720 up to 10000
  check_sizes(result, 720720, 1, 720720);
}

TEST_CASE("version 0.1: a world size the batch does not suit is refused, naming the sizes") {
  // DeepSpeed's test_invalid_world_size.
  const ElasticBatchResult result = elastic_batch(deepspeed_fixture(), 128, 1);
  CHECK_FALSE(result.sizes);
  CHECK(result.final_batch == 9792);
  CHECK(result.valid_data_parallel_sizes == kFixtureSizes);
  CHECK(result.error ==
        "elasticity: 128 data-parallel ranks are not among the sizes this batch supports (train "
        "batch 9792: 32, 34, 36, 48, 51, 64, 68, 72, 96, 102, 136, 144, 153, 192, 204, 272, 288, "
        "306, 408, 576, 612, 816, 1224); run with one of them, or change elasticity.min_gpus, "
        "max_gpus, micro_batch_sizes or max_train_batch_size");
}

TEST_CASE("version 0.1: a long list of sizes is cut in the message") {
  ElasticitySpec spec;
  spec.enabled = true;
  spec.version = 0.1;
  spec.max_train_batch_size = 2'000'000;
  spec.micro_batch_sizes = {1};
  const ElasticBatchResult result = elastic_batch(spec, 17, 1);
  CHECK_THAT(result.error, Catch::Contains("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, "
                                           "16, 18, 20, 21, 22, 24, 26, 28, 30, ... (198 in all)"));
}

TEST_CASE("version 0.1: no size in range suits any candidate") {
  ElasticitySpec spec;
  spec.enabled = true;
  spec.version = 0.1;
  spec.max_train_batch_size = 100;
  spec.micro_batch_sizes = {2};
  spec.min_gpus = 64;
  spec.max_gpus = 100;
  const ElasticBatchResult result = elastic_batch(spec, 64, 1);
  CHECK_FALSE(result.sizes);
  CHECK(result.valid_data_parallel_sizes.empty());
  CHECK(result.error ==
        "elasticity: no data-parallel size from min_gpus 64 to max_gpus 100 splits a batch of at "
        "most max_train_batch_size 100 into micro batches of 2; widen the range or change the "
        "sizes");
}

TEST_CASE("a micro batch above max_train_batch_size is refused") {
  ElasticitySpec spec = deepspeed_fixture();
  spec.max_train_batch_size = 16;
  const ElasticBatchResult v01 = elastic_batch(spec, 1, 1);
  CHECK(v01.error ==
        "elasticity: micro batch size 17 is above max_train_batch_size 16; every micro batch "
        "size must fit in the batch: lower micro_batch_sizes or raise max_train_batch_size");
  // Version 0.2 shares the batch among a node's replicas: 64 / 4 = 16.
  spec.max_train_batch_size = 64;
  const ElasticBatchResult v02 = elastic_batch(version_02(spec, 4, 1), 4, 1);
  CHECK_FALSE(v02.sizes);
  CHECK_THAT(v02.error, Catch::Contains("micro batch size 17 is above max_train_batch_size 64 / 4 "
                                        "data-parallel ranks per node = 16"));
}

TEST_CASE("micro batch sizes whose least common multiple overflows are refused") {
  ElasticitySpec spec;
  spec.enabled = true;
  spec.version = 0.1;
  spec.max_train_batch_size = int64_t{1} << 31;
  spec.micro_batch_sizes = {1 << 30, (1 << 30) - 1, (1 << 30) - 3};
  CHECK_THAT(elastic_batch(spec, 1, 1).error, Catch::Contains("least common multiple"));
}

TEST_CASE("a world that model-parallel groups do not tile is refused") {
  CHECK(elastic_batch(deepspeed_fixture(), 10, 4).error ==
        "elasticity: a world of 10 ranks cannot be split into model-parallel groups of 4");
}

TEST_CASE("version 0.2 with one GPU per node and no model parallelism is version 0.1") {
  const ElasticBatchResult result = elastic_batch(version_02(deepspeed_fixture(), 1, 1), 64, 1);
  CHECK(result.valid_data_parallel_sizes == kFixtureSizes);
  check_sizes(result, 9792, 17, 9);
}

TEST_CASE("version 0.2 searches in whole nodes of replicas") {
  // 8 GPUs per node in groups of 2: 4 replicas per node. The search runs
  // on max batch 10000 / 4 = 2500 and 32 / 8 = 4 to 1500 / 8 = 187 nodes;
  // its batch 2160 and node counts are scaled by 4.
  const ElasticBatchResult result = elastic_batch(version_02(deepspeed_fixture(), 8, 2), 48, 2);
  CHECK(result.final_batch == 8640);
  CHECK(result.valid_data_parallel_sizes == std::vector<int64_t>{16, 20, 24, 36, 40, 48, 60, 72, 80,
                                                                 108, 120, 144, 180, 216, 240, 360,
                                                                 540, 720});
  // 8640 / 24 replicas = 360: 12 divides it, 16 and 17 do not.
  check_sizes(result, 8640, 12, 30);
}

TEST_CASE("version 0.2: GPU bounds below a node take DeepSpeed's defaults") {
  // min_gpus 1 and max_gpus 4 are 0 nodes of 8: 1 node and 1250 / 8 = 156
  // nodes, not 0.
  ElasticitySpec spec = version_02(deepspeed_fixture(), 8, 1);
  spec.min_gpus = 1;
  spec.max_gpus = 4;
  const ElasticBatchResult result = elastic_batch(spec, 64, 1);
  CHECK(result.final_batch == 7680);
  CHECK(result.valid_data_parallel_sizes.size() == 18);
  check_sizes(result, 7680, 12, 10);
}

TEST_CASE("version 0.2: without prefer_larger_batch the first micro batch listed wins") {
  ElasticitySpec spec = version_02(deepspeed_fixture(), 8, 2);
  spec.micro_batch_sizes = {12, 8, 16, 17};
  spec.prefer_larger_batch = false;
  // Batch 7680 over 24 replicas is 320: 8 and 16 divide it; 8 is listed first.
  const ElasticBatchResult result = elastic_batch(spec, 48, 2);
  CHECK(result.final_batch == 7680);
  check_sizes(result, 7680, 8, 40);
}

TEST_CASE("version 0.2: a size the batch does not suit gets a batch of its own") {
  // 128 replicas: per micro batch the largest multiple of micro x 128 up to
  // 10000 (9216, 9216, 8192, 8704); the largest is 9216, micro 12 the
  // largest dividing 9216 / 128 = 72.
  const ElasticBatchResult larger = elastic_batch(version_02(deepspeed_fixture(), 1, 1), 128, 1);
  CHECK(larger.valid_data_parallel_sizes == std::vector<int64_t>{128});
  check_sizes(larger, 9216, 12, 6);
  ElasticitySpec spec = version_02(deepspeed_fixture(), 1, 1);
  spec.prefer_larger_batch = false;
  const ElasticBatchResult smaller = elastic_batch(spec, 128, 1);
  CHECK(smaller.valid_data_parallel_sizes == std::vector<int64_t>{128});
  check_sizes(smaller, 8192, 8, 8);
}

TEST_CASE("version 0.2 with model parallelism: DeepSpeed's 16 GPUs, groups of 4, 8 per node") {
  // test_model_parallel_v2_valid. 4 replicas are not among the sizes, so
  // the batch is 10000 / 68 x 68 = 9996. Its micro batch divides a
  // replica's share, 2499 = 147 x 17 (DeepSpeed divides by all 16 GPUs and
  // would pick 16, which leaves 156.19 accumulation steps).
  const ElasticBatchResult result = elastic_batch(version_02(deepspeed_fixture(), 8, 4), 16, 4);
  CHECK(result.valid_data_parallel_sizes == std::vector<int64_t>{4});
  check_sizes(result, 9996, 17, 147);
}

TEST_CASE("version 0.2: a batch of its own that would be empty is refused") {
  ElasticitySpec spec;
  spec.enabled = true;
  spec.max_train_batch_size = 100;
  spec.micro_batch_sizes = {8};
  const ElasticBatchResult result = elastic_batch(spec, 16, 1);
  CHECK_FALSE(result.sizes);
  CHECK(result.error ==
        "elasticity: 16 data-parallel ranks are not among the sizes the elastic batch suits, and "
        "a batch for them alone is empty: micro batch 8 x 16 ranks is above max_train_batch_size "
        "100; raise it, or run on fewer ranks");
}

}  // namespace dslaunch::spec
