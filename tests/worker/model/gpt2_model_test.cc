#include "worker/model/gpt2_model.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/layout/vocab_chunks.h"
#include "kernels/backend.h"

namespace dslaunch::worker::model {
namespace {

core::Gpt2Config tiny_config() {
  core::Gpt2Config config;
  config.num_layers = 2;
  config.channels = 16;
  config.num_heads = 2;
  config.vocab_size = 20;
  config.padded_vocab_size = 24;
  config.max_seq_len = 8;
  return config;
}

struct Batch {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

Batch random_batch(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  std::mt19937_64 engine(seed);
  Batch batch;
  for (int64_t i = 0; i < B * T; ++i) {
    batch.inputs.push_back(static_cast<int32_t>(engine() % vocab));
    batch.targets.push_back(static_cast<int32_t>(engine() % vocab));
  }
  return batch;
}

TEST_CASE("the initial loss is close to ln(vocabulary): small weights give near-uniform logits") {
  const core::ParameterTable table(tiny_config());
  auto backend = kernels::make_cpu_backend(1);
  std::vector<float> params(table.total());
  init_gpt2_parameters(table, 7, params.data());
  Gpt2Model model(table, *backend, 2, 8);
  const Batch batch = random_batch(2, 8, 20, 1);
  const float loss = model.forward(params.data(), batch.inputs.data(), batch.targets.data(), 2);
  CHECK(loss == Approx(std::log(20.0)).margin(0.05));
}

TEST_CASE("every layout starts from the same weights: a slice's initialisation is the slice") {
  const core::ParameterTable whole(tiny_config());
  std::vector<float> all(whole.total());
  init_gpt2_parameters(whole, 11, all.data());
  const int size = 2;  // the tiny model's two heads
  for (int rank = 0; rank < size; ++rank) {
    for (int stage = 0; stage < 2; ++stage) {
      const core::ParameterTable slice(tiny_config(),
                                       core::ModelShard{.tensor_rank = rank,
                                                        .tensor_size = size,
                                                        .stage = stage,
                                                        .stages = 2,
                                                        .chunks = {{stage, stage + 1}}});
      std::vector<float> mine(slice.total());
      init_gpt2_parameters(slice, 11, mine.data());
      for (const core::TensorInfo& t : slice.tensors()) {
        const core::TensorInfo& global = whole.at(t.name);
        std::vector<float> expected(t.numel);
        core::copy_out_of_global(t, all.data() + global.offset, expected.data(), sizeof(float));
        INFO(t.name << " on tensor rank " << rank << ", stage " << stage);
        CHECK(std::vector<float>(mine.begin() + t.offset, mine.begin() + t.offset + t.numel) ==
              expected);
      }
    }
  }
}

TEST_CASE("any range of the initialisation is that range of the whole, in every layout") {
  const core::ParameterTable whole(tiny_config());
  const core::ParameterTable slice(tiny_config(),
                                   core::ModelShard{.tensor_rank = 1, .tensor_size = 2});
  std::mt19937_64 engine(5);
  for (const core::ParameterTable* table : {&whole, &slice}) {
    std::vector<float> all(table->total());
    init_gpt2_parameters(*table, 11, all.data());
    // One initializer for every range, forwards and backwards (its streams
    // go on or start over), and in pieces of increasing ranges.
    Gpt2Initializer initializer(*table, 11);
    std::vector<float> pieces(table->total(), -1.0f);
    for (int64_t begin = 0; begin < table->total(); begin += 37) {
      const int64_t end = std::min(begin + 37, table->total());
      initializer.fill(begin, end, pieces.data() + begin);
    }
    CHECK(pieces == all);
    for (int trial = 0; trial < 200; ++trial) {
      // Ranges of every length, starting at odd and even elements alike
      // (Box-Muller draws its normals in pairs).
      const int64_t begin = static_cast<int64_t>(engine() % table->total());
      const int64_t end = begin + static_cast<int64_t>(engine() % (table->total() - begin + 1));
      std::vector<float> range(end - begin, -1.0f);
      init_gpt2_parameter_range(*table, 11, begin, end, range.data());
      INFO((table == &whole ? "whole model" : "tensor slice") << ", floats [" << begin << ", "
                                                              << end << ")");
      CHECK(range == std::vector<float>(all.begin() + begin, all.begin() + end));
      std::vector<float> kept(end - begin, -1.0f);
      initializer.fill(begin, end, kept.data());
      CHECK(kept == range);
    }
  }
}

TEST_CASE("a weight's values are its stream's Box-Muller pairs, in order") {
  const core::ParameterTable table(tiny_config());
  std::vector<float> all(table.total());
  init_gpt2_parameters(table, 11, all.data());
  const core::TensorInfo& wte = table.at("transformer.wte.weight");
  // The stream seeded from the job seed and the tensor's index (splitmix64).
  const auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  std::mt19937_64 engine(mix(11 ^ mix(wte.global_index)));
  const auto uniform = [&engine] { return (static_cast<double>(engine() >> 11) + 0.5) * 0x1.0p-53; };
  for (int64_t i = 0; i < wte.numel; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 2.0 * M_PI * uniform();
    INFO("wte element " << i);
    REQUIRE(all[wte.offset + i] == static_cast<float>(0.02 * radius * std::cos(angle)));
    REQUIRE(all[wte.offset + i + 1] == static_cast<float>(0.02 * radius * std::sin(angle)));
  }
}

TEST_CASE("the model refuses a tensor slice without its group") {
  auto backend = kernels::make_cpu_backend(1);
  const core::ParameterTable slice(tiny_config(),
                                   core::ModelShard{.tensor_rank = 1, .tensor_size = 2});
  CHECK_THROWS_WITH(Gpt2Model(slice, *backend, 1, 8),
                    Catch::Contains("tensor rank 1 of 2 needs the communicator of its tensor group"));
}

TEST_CASE("initialisation is deterministic in the seed and follows GPT-2's scheme") {
  core::Gpt2Config config = tiny_config();
  config.channels = 64;
  config.num_heads = 4;
  const core::ParameterTable table(config);
  std::vector<float> a(table.total()), b(table.total()), c(table.total());
  init_gpt2_parameters(table, 42, a.data());
  init_gpt2_parameters(table, 42, b.data());
  init_gpt2_parameters(table, 43, c.data());
  CHECK(a == b);
  CHECK(a != c);
  auto stddev = [&](const std::string& name) {
    const core::TensorInfo& t = table.at(name);
    double sum = 0, squares = 0;
    for (int64_t i = 0; i < t.numel; ++i) {
      sum += a[t.offset + i];
      squares += static_cast<double>(a[t.offset + i]) * a[t.offset + i];
    }
    const double mean = sum / t.numel;
    return std::sqrt(squares / t.numel - mean * mean);
  };
  CHECK(stddev("transformer.h.0.attn.c_attn.weight") == Approx(0.02).epsilon(0.05));
  CHECK(stddev("transformer.wte.weight") == Approx(0.02).epsilon(0.1));
  CHECK(stddev("transformer.h.1.mlp.c_proj.weight") == Approx(0.02 / 2.0).epsilon(0.05));
  CHECK(stddev("transformer.h.0.attn.c_proj.weight") == Approx(0.02 / 2.0).epsilon(0.05));
  const core::TensorInfo& ln = table.at("transformer.h.1.ln_2.weight");
  const core::TensorInfo& bias = table.at("transformer.h.1.mlp.c_fc.bias");
  for (int64_t i = 0; i < ln.numel; ++i) CHECK(a[ln.offset + i] == 1.0f);
  for (int64_t i = 0; i < bias.numel; ++i) CHECK(a[bias.offset + i] == 0.0f);
}

// The model's gradient of every tensor against central differences of the
// loss along a random direction inside that tensor.
TEST_CASE("backward matches finite differences of the loss for every parameter tensor") {
  const core::ParameterTable table(tiny_config());
  auto backend = kernels::make_cpu_backend(1);
  std::vector<float> params(table.total());
  init_gpt2_parameters(table, 3, params.data());
  // Larger weights than GPT-2's init make every path's gradient visible.
  for (float& p : params) p *= 3;
  const int64_t B = 2, T = 8;
  const Batch batch = random_batch(B, T, 20, 9);
  Gpt2Model model(table, *backend, B, T);
  std::vector<float> grads(table.total(), 0.0f);
  model.forward(params.data(), batch.inputs.data(), batch.targets.data(), B);
  model.backward(params.data(), grads.data(), 1.0f, {});

  std::mt19937_64 engine(11);
  std::normal_distribution<double> normal;
  for (const core::TensorInfo& tensor : table.tensors()) {
    // A unit direction, so the step's size does not grow with the tensor.
    std::vector<double> direction(tensor.numel);
    double norm = 0;
    for (double& d : direction) {
      d = normal(engine);
      norm += d * d;
    }
    for (double& d : direction) d /= std::sqrt(norm);
    double analytic = 0;
    for (int64_t i = 0; i < tensor.numel; ++i) analytic += grads[tensor.offset + i] * direction[i];
    const double h = 1e-2;
    auto loss_at = [&](double sign) {
      std::vector<float> moved = params;
      for (int64_t i = 0; i < tensor.numel; ++i) {
        moved[tensor.offset + i] += static_cast<float>(sign * h * direction[i]);
      }
      return static_cast<double>(
          model.forward(moved.data(), batch.inputs.data(), batch.targets.data(), B));
    };
    const double numeric = (loss_at(1) - loss_at(-1)) / (2 * h);
    INFO(tensor.name << ": analytic " << analytic << ", numeric " << numeric);
    CHECK(analytic == Approx(numeric).epsilon(0.02).margin(2e-4));
  }
}

TEST_CASE("backward accumulates, scales by loss_scale, and reports every float once in order") {
  const core::ParameterTable table(tiny_config());
  auto backend = kernels::make_cpu_backend(1);
  std::vector<float> params(table.total());
  init_gpt2_parameters(table, 5, params.data());
  Gpt2Model model(table, *backend, 2, 8);
  const Batch batch = random_batch(2, 8, 20, 2);
  std::vector<float> once(table.total(), 0.0f);
  std::vector<int> reported(table.total(), 0);
  std::vector<int64_t> order;
  model.forward(params.data(), batch.inputs.data(), batch.targets.data(), 2);
  model.backward(params.data(), once.data(), 1.0f, [&](int64_t begin, int64_t end) {
    order.push_back(begin);
    for (int64_t i = begin; i < end; ++i) ++reported[i];
  });
  for (int64_t i = 0; i < table.total(); ++i) REQUIRE(reported[i] == 1);
  // ln_f, then block 1, block 0, then the embeddings.
  REQUIRE(order.size() == 4);
  CHECK(order[0] == table.at("transformer.ln_f.weight").offset);
  CHECK(order[1] == table.layer_range(1).first);
  CHECK(order[2] == table.layer_range(0).first);
  CHECK(order[3] == 0);

  std::vector<float> twice(table.total(), 0.0f);
  for (int pass = 0; pass < 2; ++pass) {
    model.forward(params.data(), batch.inputs.data(), batch.targets.data(), 2);
    model.backward(params.data(), twice.data(), 0.5f, {});
  }
  for (int64_t i = 0; i < table.total(); ++i) {
    REQUIRE(twice[i] == Approx(once[i]).margin(1e-7).epsilon(1e-5));
  }
}

TEST_CASE("recomputed blocks give the same bits with less activation memory") {
  const core::ParameterTable table(tiny_config());
  auto backend = kernels::make_cpu_backend(1);
  std::vector<float> params(table.total());
  init_gpt2_parameters(table, 3, params.data());
  const Batch batch = random_batch(2, 8, 20, 6);
  struct Outcome {
    float loss;
    std::vector<float> grads;
    int64_t activation_bytes;
  };
  auto run = [&](int blocks) {
    Gpt2Model model(table, *backend, 2, 8, nullptr, 1, ActivationRecompute{.blocks = blocks});
    Outcome out{model.forward(params.data(), batch.inputs.data(), batch.targets.data(), 2),
                std::vector<float>(table.total(), 0.0f), model.activation_bytes()};
    model.backward(params.data(), out.grads.data(), 1.0f, {});
    return out;
  };
  const Outcome stored = run(0);
  for (const int blocks : {1, 2}) {
    INFO(blocks << " block(s) recomputed");
    const Outcome recomputed = run(blocks);
    CHECK(recomputed.loss == stored.loss);
    CHECK(recomputed.grads == stored.grads);
    // One block's activations are recomputed into a buffer of their own:
    // the saving starts from the second block.
    if (blocks == 1) CHECK(recomputed.activation_bytes == stored.activation_bytes);
    if (blocks == 2) CHECK(recomputed.activation_bytes < stored.activation_bytes);
  }
}

TEST_CASE("the padded vocabulary rows get no gradient") {
  const core::ParameterTable table(tiny_config());
  auto backend = kernels::make_cpu_backend(1);
  std::vector<float> params(table.total());
  init_gpt2_parameters(table, 5, params.data());
  Gpt2Model model(table, *backend, 2, 8);
  const Batch batch = random_batch(2, 8, 20, 4);
  std::vector<float> grads(table.total(), 0.0f);
  model.forward(params.data(), batch.inputs.data(), batch.targets.data(), 2);
  model.backward(params.data(), grads.data(), 1.0f, {});
  const int64_t C = table.config().channels;
  for (int64_t row = 20; row < 24; ++row) {
    for (int64_t c = 0; c < C; ++c) REQUIRE(grads[row * C + c] == 0.0f);
  }
}

TEST_CASE("tokens outside the vocabulary are refused before any computation") {
  const core::ParameterTable table(tiny_config());
  auto backend = kernels::make_cpu_backend(1);
  std::vector<float> params(table.total());
  Gpt2Model model(table, *backend, 1, 8);
  std::vector<int32_t> inputs(8, 1), targets(8, 1);
  targets[3] = 20;
  CHECK_THROWS_WITH(model.forward(params.data(), inputs.data(), targets.data(), 1),
                    Catch::Contains("outside the vocabulary"));
}

TEST_CASE("the parameter table lays blocks out contiguously with Conv1D shapes") {
  const core::ParameterTable table(tiny_config());
  const int64_t C = 16;
  CHECK(table.at("transformer.wte.weight").shape == std::vector<int64_t>{24, C});
  CHECK(table.at("transformer.h.0.attn.c_attn.weight").shape == std::vector<int64_t>{C, 3 * C});
  CHECK(table.at("transformer.h.1.mlp.c_proj.weight").shape == std::vector<int64_t>{4 * C, C});
  const auto [begin0, end0] = table.layer_range(0);
  const auto [begin1, end1] = table.layer_range(1);
  CHECK(begin0 == (24 + 8) * C);
  CHECK(end0 == begin1);
  CHECK(end1 - begin1 == 12 * C * C + 13 * C);
  CHECK(table.total() == end1 + 2 * C);
  CHECK(table.at("transformer.h.0.ln_1.bias").weight_decay == false);
  CHECK(table.at("transformer.h.0.mlp.c_fc.weight").weight_decay == true);
}

// A ParameterSource that makes the model's buffer hold only what it has
// acquired (as ZeRO stage 3's workspace does), copied from the whole
// parameters, and records the calls.
class CopyingSource : public ParameterSource {
 public:
  CopyingSource(const core::ParameterTable& table, const std::vector<float>& whole,
                std::vector<float>& buffer)
      : table_(table), whole_(whole), buffer_(buffer) {}

  void acquire_embeddings() override {
    events.push_back("+e");
    for_embeddings([this](int64_t b, int64_t e) { copy(b, e); });
  }
  void release_embeddings() override {
    events.push_back("-e");
    for_embeddings([this](int64_t b, int64_t e) { clear(b, e); });
  }
  // Chunk events name the use: e (encoder), o (output layer forward), g
  // (its backward).
  void acquire_vocab_chunk(int chunk, VocabUse use) override {
    events.push_back(fmt::format("+{}{}", use_letter(use), chunk));
    const auto [b, e] = chunk_range(chunk);
    copy(b, e);
  }
  void release_vocab_chunk(int chunk, VocabUse use) override {
    events.push_back(fmt::format("-{}{}", use_letter(use), chunk));
    const auto [b, e] = chunk_range(chunk);
    clear(b, e);
  }
  static char use_letter(VocabUse use) {
    return use == VocabUse::kEncoder ? 'e' : use == VocabUse::kOutputForward ? 'o' : 'g';
  }
  void acquire_block(int layer, Pass pass) override {
    events.push_back(fmt::format("+{}{}", pass == Pass::kForward ? 'f' : 'b', layer));
    const auto [b, e] = table_.layer_range(layer);
    copy(b, e);
  }
  void release_block(int layer, Pass pass) override {
    events.push_back(fmt::format("-{}{}", pass == Pass::kForward ? 'f' : 'b', layer));
    const auto [b, e] = table_.layer_range(layer);
    clear(b, e);
  }

  std::vector<std::string> events;

 private:
  // What lies outside the blocks, but the token embedding.
  template <typename F>
  void for_embeddings(F f) {
    const int layers = static_cast<int>(table_.config().num_layers);
    const core::TensorInfo& wte = table_.tensor(core::TensorRole::kWte);
    f(0, wte.offset);
    f(wte.offset + wte.numel, table_.layer_range(0).first);
    f(table_.layer_range(layers - 1).second, table_.total());
  }
  std::pair<int64_t, int64_t> chunk_range(int chunk) const {
    const int64_t C = table_.config().channels;
    const core::TensorInfo& wte = table_.tensor(core::TensorRole::kWte);
    const core::VocabChunks chunks(wte.numel / C, C);
    return {wte.offset + chunks.begin(chunk) * C, wte.offset + chunks.end(chunk) * C};
  }
  void copy(int64_t b, int64_t e) {
    std::copy(whole_.begin() + b, whole_.begin() + e, buffer_.begin() + b);
  }
  void clear(int64_t b, int64_t e) { std::fill(buffer_.begin() + b, buffer_.begin() + e, 0.0f); }

  const core::ParameterTable& table_;
  const std::vector<float>& whole_;
  std::vector<float>& buffer_;
};

TEST_CASE("a parameter source is called around every use, and acquiring is all the model needs") {
  const core::ParameterTable table(tiny_config());
  auto backend = kernels::make_cpu_backend(1);
  std::vector<float> params(table.total());
  init_gpt2_parameters(table, 3, params.data());
  const Batch batch = random_batch(2, 8, 20, 5);

  Gpt2Model plain(table, *backend, 2, 8);
  std::vector<float> plain_grads(table.total(), 0.0f);
  const float plain_loss =
      plain.forward(params.data(), batch.inputs.data(), batch.targets.data(), 2);
  plain.backward(params.data(), plain_grads.data(), 1.0f, {});

  std::vector<float> buffer(table.total(), 0.0f);
  CopyingSource source(table, params, buffer);
  Gpt2Model sourced(table, *backend, 2, 8);
  sourced.set_parameter_source(&source);
  std::vector<float> grads(table.total(), 0.0f);
  const float loss = sourced.forward(buffer.data(), batch.inputs.data(), batch.targets.data(), 2);
  sourced.backward(buffer.data(), grads.data(), 1.0f, {});
  CHECK(loss == plain_loss);
  CHECK(grads == plain_grads);
  // 24 vocabulary rows: 8 chunks of 3.
  const core::VocabChunks chunks(24, 16);
  REQUIRE(chunks.count() == 8);
  std::vector<std::string> expected{"+e"};
  const auto pass = [&](char use) {
    for (int k = 0; k < 8; ++k) {
      expected.push_back(fmt::format("+{}{}", use, k));
      expected.push_back(fmt::format("-{}{}", use, k));
    }
  };
  pass('e');
  for (const char* event : {"+f0", "-f0", "+f1", "-f1"}) expected.push_back(event);
  pass('o');
  pass('g');
  for (const char* event : {"+b1", "-b1", "+b0", "-b0", "-e"}) expected.push_back(event);
  CHECK(source.events == expected);
  CHECK(std::all_of(buffer.begin(), buffer.end(), [](float x) { return x == 0.0f; }));
}

// An OutputGradientSink that takes each part away (as ZeRO stage 3's
// reducer does: added to a sum, the floats left zero) and checks that the
// model leaves the parts alone until it waited for them.
class TakingSink : public OutputGradientSink {
 public:
  explicit TakingSink(std::vector<float>& grads) : grads_(grads), taken(grads.size(), 0.0f) {}

  void output_part_ready(int64_t begin, int64_t end) override {
    parts.emplace_back(begin, end);
    for (int64_t i = begin; i < end; ++i) {
      taken[i] += grads_[i];
      grads_[i] = 0.0f;
    }
    pending = true;
  }
  void wait_output_parts() override { pending = false; waits += 1; }

  std::vector<float>& grads_;
  std::vector<float> taken;
  std::vector<std::pair<int64_t, int64_t>> parts;
  bool pending = false;
  int waits = 0;
};

TEST_CASE("a gradient sink gets the tied output layer's part of wte's gradient chunk by chunk") {
  const core::ParameterTable table(tiny_config());
  auto backend = kernels::make_cpu_backend(1);
  std::vector<float> params(table.total());
  init_gpt2_parameters(table, 3, params.data());
  const Batch batch = random_batch(2, 8, 20, 5);
  const core::TensorInfo& wte = table.tensor(core::TensorRole::kWte);

  Gpt2Model plain(table, *backend, 2, 8);
  std::vector<float> plain_grads(table.total(), 0.0f);
  plain.forward(params.data(), batch.inputs.data(), batch.targets.data(), 2);
  plain.backward(params.data(), plain_grads.data(), 1.0f, {});

  Gpt2Model sunk(table, *backend, 2, 8);
  std::vector<float> grads(table.total(), 0.0f);
  TakingSink sink(grads);
  sunk.set_output_gradient_sink(&sink);
  int64_t wte_reported = 0;
  sunk.forward(params.data(), batch.inputs.data(), batch.targets.data(), 2);
  sunk.backward(params.data(), grads.data(), 1.0f, [&](int64_t begin, int64_t end) {
    // wte is reported once, after the model waited for its parts.
    if (begin <= wte.offset && wte.offset < end) {
      CHECK_FALSE(sink.pending);
      wte_reported += 1;
    }
  });
  CHECK(wte_reported == 1);
  CHECK(sink.waits == 1);
  // The parts tile wte, a chunk of rows each, in order.
  const core::VocabChunks chunks(24, 16);
  REQUIRE(sink.parts.size() == static_cast<size_t>(chunks.count()));
  for (int k = 0; k < chunks.count(); ++k) {
    CHECK(sink.parts[k] == std::make_pair(wte.offset + chunks.begin(k) * 16,
                                          wte.offset + chunks.end(k) * 16));
  }
  // What the sink took plus what the encoder added is the whole gradient,
  // to the bit: the same two terms, added in the same order.
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = sink.taken[i] + grads[i];
  CHECK(grads == plain_grads);
  // The encoder adds only its tokens' rows: the padded rows' parts are all
  // the output layer's, and zero.
  for (int64_t i = wte.offset + 20 * 16; i < wte.offset + 24 * 16; ++i) {
    CHECK(sink.taken[i] == 0.0f);
  }
}

}  // namespace
}  // namespace dslaunch::worker::model
