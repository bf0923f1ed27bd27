#include "tests/kernels/cpu/kernel_testing.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>

namespace dslaunch::kernels::testing {

Backend& cpu_backend(int threads) {
  static std::map<int, std::unique_ptr<Backend>> backends;
  auto& backend = backends[threads];
  if (!backend) backend = make_cpu_backend(threads);
  return *backend;
}

std::vector<float> random_floats(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(lo, hi);
  std::vector<float> values(n);
  for (float& value : values) value = uniform(generator);
  return values;
}

std::vector<double> to_double(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

std::vector<double> numeric_gradient(const TensorFunction& f, std::vector<double> x,
                                     const std::vector<double>& weights, double h) {
  const auto loss = [&](const std::vector<double>& at) {
    const std::vector<double> out = f(at);
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i) sum += weights[i] * out[i];
    return sum;
  };
  std::vector<double> gradient(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss(x);
    x[i] = saved - h;
    const double down = loss(x);
    x[i] = saved;
    gradient[i] = (up - down) / (2 * h);
  }
  return gradient;
}

double relative_error(const std::vector<double>& actual, const std::vector<double>& expected) {
  if (actual.size() != expected.size()) return INFINITY;
  double max_difference = 0;
  double scale = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    max_difference = std::max(max_difference, std::abs(actual[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return scale == 0 ? max_difference : max_difference / scale;
}

double relative_error(const std::vector<float>& actual, const std::vector<double>& expected) {
  return relative_error(to_double(actual), expected);
}

std::vector<double> added(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<double> difference(after.size());
  for (size_t i = 0; i < after.size(); ++i) difference[i] = double{after[i]} - before[i];
  return difference;
}

}  // namespace dslaunch::kernels::testing
