// Runs under mpirun (see mpi_test): every rank executes every test case.
#include "worker/parallel/compressed_all_reduce.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "tests/worker/parallel/test_groups.h"

using dslaunch::worker::CompressedAllReduce;
using dslaunch::worker::comm::testing::world_data;
using dslaunch::worker::comm::testing::world_rank;
using dslaunch::worker::comm::testing::world_size;

namespace {

// Rank w's input of call `call`: normal values with exact zeros, negative
// zeros and repeated values among them.
std::vector<float> input_of(int w, int call, int64_t count) {
  std::mt19937 random(static_cast<unsigned>(1000 * w + 17 * call + count));
  std::normal_distribution<float> normal(0.0f, 1.0f + w);
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) {
    switch (random() % 16) {
      case 0: values[i] = 0.0f; break;
      case 1: values[i] = -0.0f; break;
      case 2: values[i] = 0.25f; break;
      default: values[i] = normal(random);
    }
  }
  return values;
}

// The algorithm for every rank at once, element by element, as the 1-bit
// Adam paper and DeepSpeed's compressed_allreduce describe it: no packing,
// no messages.
struct Simulation {
  Simulation(int ranks, int64_t count, int64_t padded)
      : ranks(ranks),
        count(count),
        padded(padded),
        chunk(padded / ranks),
        worker_error(ranks, std::vector<float>(padded, 0.0f)),
        server_error(ranks, std::vector<float>(padded / ranks, 0.0f)) {}

  static float sign(float x) { return x < 0.0f ? -1.0f : 1.0f; }
  float scale(const std::vector<float>& x) {
    return static_cast<float>(std::sqrt(backend->sum_of_squares(x.data(), x.size())) /
                              std::sqrt(static_cast<double>(x.size())));
  }

  // The result every rank gets.
  std::vector<float> run(const std::vector<std::vector<float>>& inputs) {
    std::vector<std::vector<float>> worker_sign(ranks, std::vector<float>(padded));
    std::vector<float> worker_scale(ranks);
    for (int w = 0; w < ranks; ++w) {
      std::vector<float> x(padded, 0.0f);
      for (int64_t i = 0; i < padded; ++i) {
        x[i] = (i < count ? inputs[w][i] : 0.0f) + worker_error[w][i];
      }
      worker_scale[w] = scale(x);
      for (int64_t i = 0; i < padded; ++i) {
        worker_sign[w][i] = sign(x[i]);
        worker_error[w][i] = x[i] - worker_scale[w] * worker_sign[w][i];
      }
    }
    std::vector<float> result(count);
    for (int r = 0; r < ranks; ++r) {
      std::vector<float> y(chunk);
      for (int64_t k = 0; k < chunk; ++k) {
        float sum = 0.0f;
        for (int w = 0; w < ranks; ++w) {
          const float term = worker_sign[w][r * chunk + k] * (worker_scale[w] * (1.0f / ranks));
          sum = w == 0 ? term : sum + term;
        }
        y[k] = sum + server_error[r][k];
      }
      const float server_scale = scale(y);
      for (int64_t k = 0; k < chunk; ++k) {
        server_error[r][k] = y[k] - server_scale * sign(y[k]);
        if (r * chunk + k < count) result[r * chunk + k] = server_scale * sign(y[k]);
      }
    }
    return result;
  }

  std::unique_ptr<dslaunch::kernels::Backend> backend = dslaunch::kernels::make_cpu_backend(1);
  int ranks;
  int64_t count, padded, chunk;
  std::vector<std::vector<float>> worker_error;
  std::vector<std::vector<float>> server_error;
};

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("padded sizes make whole-byte chunks for every rank", "[compressed]") {
  CHECK(CompressedAllReduce::padded_size(1, 2) == 16);
  CHECK(CompressedAllReduce::padded_size(16, 2) == 16);
  CHECK(CompressedAllReduce::padded_size(17, 2) == 32);
  CHECK(CompressedAllReduce::padded_size(1, 3) == 72);  // 3 x lcm(3, 8)
  CHECK(CompressedAllReduce::padded_size(1, 4) == 32);
  CHECK(CompressedAllReduce::padded_size(1001, 3) == 1008);
}

TEST_CASE("the compressed all-reduce equals the simulation bit for bit, errors included",
          "[compressed]") {
  auto backend = dslaunch::kernels::make_cpu_backend(1);
  const int ranks = world_size();
  const int me = world_rank();
  // One segment of sizes that divide by nothing, and several segments in
  // one buffer (each compressed on its own, in the same two messages).
  const std::vector<std::vector<int64_t>> layouts = {
      {1}, {13}, {1001}, {65537}, {13, 1, 1001, 64, 7}};
  for (const std::vector<int64_t>& segments : layouts) {
    int64_t count = 0;
    for (const int64_t n : segments) count += n;
    CAPTURE(ranks, segments);
    CompressedAllReduce reduce(world_data(), *backend, segments);
    REQUIRE(reduce.count() == count);
    std::vector<Simulation> simulations;
    int64_t worker_floats = 0, server_floats = 0;
    for (const int64_t n : segments) {
      const int64_t padded = CompressedAllReduce::padded_size(n, ranks);
      simulations.emplace_back(ranks, n, padded);
      worker_floats += padded;
      server_floats += padded / ranks;
    }
    REQUIRE(static_cast<int64_t>(reduce.worker_error().size()) == worker_floats);
    REQUIRE(static_cast<int64_t>(reduce.server_error().size()) == server_floats);
    for (int call = 0; call < 4; ++call) {
      CAPTURE(call);
      std::vector<std::vector<float>> inputs;
      for (int w = 0; w < ranks; ++w) inputs.push_back(input_of(w, call, count));
      std::vector<float> buffer = inputs[me];
      REQUIRE(reduce.average(buffer.data()).ok());
      int64_t begin = 0, worker = 0, server = 0;
      for (size_t s = 0; s < segments.size(); ++s) {
        Simulation& simulation = simulations[s];
        std::vector<std::vector<float>> pieces;
        for (int w = 0; w < ranks; ++w) {
          pieces.emplace_back(inputs[w].begin() + begin, inputs[w].begin() + begin + segments[s]);
        }
        const std::vector<float> expected = simulation.run(pieces);
        CHECK(same_bits(buffer.data() + begin, expected.data(), segments[s]));
        CHECK(same_bits(reduce.worker_error().data() + worker, simulation.worker_error[me].data(),
                        simulation.padded));
        CHECK(same_bits(reduce.server_error().data() + server, simulation.server_error[me].data(),
                        simulation.chunk));
        begin += segments[s];
        worker += simulation.padded;
        server += simulation.chunk;
      }
    }
  }
}

TEST_CASE("error feedback makes the running mean converge to the true mean", "[compressed]") {
  // Sending the same inputs again and again, the errors carry what each call
  // left out: the average of the results approaches the exact mean.
  auto backend = dslaunch::kernels::make_cpu_backend(1);
  const int ranks = world_size();
  const int64_t count = 4099;
  CompressedAllReduce reduce(world_data(), *backend, {count});
  std::vector<double> exact(count, 0.0);
  for (int w = 0; w < ranks; ++w) {
    const std::vector<float> in = input_of(w, 0, count);
    for (int64_t i = 0; i < count; ++i) exact[i] += in[i] / static_cast<double>(ranks);
  }
  const std::vector<float> mine = input_of(world_rank(), 0, count);
  std::vector<double> running(count, 0.0);
  const int calls = 400;
  for (int call = 0; call < calls; ++call) {
    std::vector<float> buffer = mine;
    REQUIRE(reduce.average(buffer.data()).ok());
    for (int64_t i = 0; i < count; ++i) running[i] += buffer[i];
  }
  double error = 0, norm = 0;
  for (int64_t i = 0; i < count; ++i) {
    error += std::pow(running[i] / calls - exact[i], 2);
    norm += exact[i] * exact[i];
  }
  CHECK(std::sqrt(error / norm) < 0.02);
  // One call alone is far coarser.
  CompressedAllReduce fresh(world_data(), *backend, {count});
  std::vector<float> once = mine;
  REQUIRE(fresh.average(once.data()).ok());
  double once_error = 0;
  for (int64_t i = 0; i < count; ++i) once_error += std::pow(once[i] - exact[i], 2);
  CHECK(std::sqrt(once_error / norm) > 0.3);
}

TEST_CASE("reset_errors forgets the compensation", "[compressed]") {
  auto backend = dslaunch::kernels::make_cpu_backend(1);
  CompressedAllReduce reduce(world_data(), *backend, {100});
  std::vector<float> buffer = input_of(world_rank(), 1, 100);
  REQUIRE(reduce.average(buffer.data()).ok());
  reduce.reset_errors();
  for (const float e : reduce.worker_error()) REQUIRE(e == 0.0f);
  for (const float e : reduce.server_error()) REQUIRE(e == 0.0f);
}
