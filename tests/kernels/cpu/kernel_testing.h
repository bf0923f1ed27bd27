#pragma once

// Shared pieces of the CPU kernel tests: random inputs, central-difference
// gradients in double, and error measures.

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/backend.h"

namespace dslaunch::kernels::testing {

// The process's CPU backend with `threads` threads (created on first use).
Backend& cpu_backend(int threads = 2);

// n floats uniform in [lo, hi), reproducible from seed.
std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
std::vector<double> to_double(const std::vector<float>& values);

// What a float kernel's gradient may differ from central differences of the
// double reference, relative to the gradient's scale (relative_error). The
// kernels land near 1e-7; GELU's vector tanh near 1e-6.
inline constexpr double kGradientTolerance = 1e-5;

// A function of one tensor, evaluated in double.
using TensorFunction = std::function<std::vector<double>(const std::vector<double>&)>;

// The gradient at x of the scalar loss Σ_i weights[i] · f(x)[i], by central
// differences with step h.
std::vector<double> numeric_gradient(const TensorFunction& f, std::vector<double> x,
                                     const std::vector<double>& weights, double h = 1e-5);

// max_i |actual[i] - expected[i]| / max_i |expected[i]|: the error relative to
// the tensor's scale, so tiny entries do not dominate. Infinite when the sizes
// differ.
double relative_error(const std::vector<double>& actual, const std::vector<double>& expected);
double relative_error(const std::vector<float>& actual, const std::vector<double>& expected);

// after - before, in double: what a backward kernel added to a gradient that
// held `before`.
std::vector<double> added(const std::vector<float>& after, const std::vector<float>& before);

}  // namespace dslaunch::kernels::testing
