// Megatron's tensor parallelism changes no result: the tensor group's slices
// of the model give the whole model's loss, and gradients that are the
// whole model's gradients cut the same way, up to summation order.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/layout/parameter_table.h"
#include "kernels/backend.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/model/gpt2_model.h"

namespace dslaunch::worker::model {
namespace {

// 4 heads split over 2 or 4 ranks; a vocabulary of 61 padded to 64, so the
// last rank's slice ends in padding.
core::Gpt2Config config() {
  core::Gpt2Config c;
  c.num_layers = 2;
  c.channels = 32;
  c.num_heads = 4;
  c.vocab_size = 61;
  c.padded_vocab_size = 64;
  c.max_seq_len = 8;
  return c;
}

constexpr int64_t B = 3, T = 8;

void random_tokens(std::vector<int32_t>& out, uint64_t seed) {
  std::mt19937_64 engine(seed);
  for (int32_t& token : out) token = static_cast<int32_t>(engine() % 61);
}

// max |a - b| / max |b|: the error relative to the tensor's scale.
double scaled_error(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return scale == 0 ? worst : worst / scale;
}

TEST_CASE("a tensor-parallel group computes the whole model's loss and gradient slices") {
  comm::Communicator& tensor = comm::testing::groups_of({1, 1, comm::testing::world_size()}).tensor();
  const int P = tensor.size();
  auto backend = kernels::make_cpu_backend(1);

  const core::ParameterTable whole(config());
  std::vector<float> whole_params(whole.total()), whole_grads(whole.total(), 0.0f);
  init_gpt2_parameters(whole, 5, whole_params.data());
  // Biases start at 0 and LayerNorm gains at 1: moved off those values, a
  // replicated tensor applied on every rank instead of once cannot hide.
  std::mt19937_64 engine(3);
  std::uniform_real_distribution<float> noise(-0.05f, 0.05f);
  for (float& x : whole_params) x += noise(engine);
  Gpt2Model reference(whole, *backend, B, T);

  const core::ParameterTable slice(config(),
                                   core::ModelShard{.tensor_rank = tensor.rank(), .tensor_size = P});
  std::vector<float> params(slice.total()), grads(slice.total(), 0.0f);
  for (const core::TensorInfo& t : slice.tensors()) {
    core::copy_out_of_global(t, whole_params.data() + whole.at(t.name).offset,
                             params.data() + t.offset, sizeof(float));
  }
  Gpt2Model model(slice, *backend, B, T, &tensor);

  // Two micro-batches accumulated, as the trainer runs them.
  std::vector<int64_t> reported(slice.total(), 0);
  for (uint64_t micro = 0; micro < 2; ++micro) {
    std::vector<int32_t> inputs(B * T), targets(B * T);
    random_tokens(inputs, 10 + micro);
    random_tokens(targets, 20 + micro);
    const float expected = reference.forward(whole_params.data(), inputs.data(), targets.data(), B);
    const float loss = model.forward(params.data(), inputs.data(), targets.data(), B);
    REQUIRE(model.tensor_status().ok());
    CHECK(loss == Approx(expected).epsilon(1e-6));
    reference.backward(whole_params.data(), whole_grads.data(), 0.5f, {});
    model.backward(params.data(), grads.data(), 0.5f, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ++reported[i];
    });
    REQUIRE(model.tensor_status().ok());
  }
  // Every element of the slice's buffer was reported once per backward.
  CHECK(std::all_of(reported.begin(), reported.end(), [](int64_t n) { return n == 2; }));

  for (const core::TensorInfo& t : slice.tensors()) {
    std::vector<float> expected(t.numel);
    core::copy_out_of_global(t, whole_grads.data() + whole.at(t.name).offset, expected.data(),
                             sizeof(float));
    const std::vector<float> got(grads.begin() + t.offset, grads.begin() + t.offset + t.numel);
    INFO(t.name << " on tensor rank " << tensor.rank() << " of " << P);
    CHECK(scaled_error(got, expected) < 1e-5);
  }
}

TEST_CASE("recomputed blocks with partitioned activations give the same bits on a tensor group") {
  comm::Communicator& tensor = comm::testing::groups_of({1, 1, comm::testing::world_size()}).tensor();
  const int P = tensor.size();
  auto backend = kernels::make_cpu_backend(1);
  const core::ParameterTable slice(config(),
                                   core::ModelShard{.tensor_rank = tensor.rank(), .tensor_size = P});
  std::vector<float> params(slice.total());
  init_gpt2_parameters(slice, 5, params.data());
  std::vector<int32_t> inputs(B * T), targets(B * T);
  random_tokens(inputs, 30);
  random_tokens(targets, 31);
  struct Outcome {
    float loss;
    std::vector<float> grads;
    int64_t activation_bytes;
  };
  auto run = [&](ActivationRecompute recompute) {
    Gpt2Model model(slice, *backend, B, T, &tensor, 1, recompute);
    Outcome out{model.forward(params.data(), inputs.data(), targets.data(), B),
                std::vector<float>(slice.total(), 0.0f), model.activation_bytes()};
    REQUIRE(model.tensor_status().ok());
    model.backward(params.data(), out.grads.data(), 1.0f, {});
    REQUIRE(model.tensor_status().ok());
    return out;
  };
  const Outcome stored = run({});
  const Outcome whole_inputs = run({.blocks = 2, .partition_activations = false});
  const Outcome partitioned = run({.blocks = 2, .partition_activations = true});
  for (const Outcome* recomputed : {&whole_inputs, &partitioned}) {
    CHECK(recomputed->loss == stored.loss);
    CHECK(recomputed->grads == stored.grads);
  }
  // Block 0's output is kept as a 1/P slice, (1 - 1/P) x B x T x C floats
  // less, at the price of 3 whole outputs in the shared buffer: a saving once
  // more blocks or micro-batches are kept.
  const int64_t output_bytes = static_cast<int64_t>(sizeof(float)) * B * T * 32;
  CHECK(partitioned.activation_bytes - whole_inputs.activation_bytes ==
        3 * output_bytes - output_bytes * (P - 1) / P);
  CHECK(whole_inputs.activation_bytes < stored.activation_bytes);
}

}  // namespace
}  // namespace dslaunch::worker::model
