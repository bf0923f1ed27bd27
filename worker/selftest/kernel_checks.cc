#include "worker/selftest/kernel_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "kernels/device_buffer.h"
#include "kernels/half_precision.h"
#include "kernels/pinned_host_memory.h"

namespace dslaunch::worker::selftest {
namespace {

using core::DType;
using kernels::Backend;
using kernels::DeviceBuffer;
using Outputs = std::vector<std::vector<float>>;

// Shapes of a small GPT layer: rows not a multiple of anything, a padded
// vocabulary, a sequence past the CPU attention's 64-row blocks.
constexpr int64_t kB = 2, kT = 70, kC = 48, kNH = 4, kOC = 4 * kC, kV = 500, kVp = 512;
constexpr int64_t kN = kB * kT;

class Inputs {
 public:
  explicit Inputs(uint32_t seed) : generator_(seed) {}
  std::vector<float> floats(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> uniform(lo, hi);
    std::vector<float> values(n);
    for (float& v : values) v = uniform(generator_);
    return values;
  }
  std::vector<int32_t> ints(int64_t n, int32_t below) {
    std::uniform_int_distribution<int32_t> uniform(0, below - 1);
    std::vector<int32_t> values(n);
    for (int32_t& v : values) v = uniform(generator_);
    return values;
  }

 private:
  std::mt19937 generator_;
};

template <class T>
DeviceBuffer<T> upload(Backend& backend, const std::vector<T>& host) {
  DeviceBuffer<T> buffer(backend, static_cast<int64_t>(host.size()));
  backend.copy_host_to_device(buffer.data(), host.data(), buffer.bytes());
  return buffer;
}

template <class T>
std::vector<T> download(Backend& backend, const DeviceBuffer<T>& buffer) {
  std::vector<T> host(buffer.size());
  backend.copy_device_to_host(host.data(), buffer.data(), buffer.bytes());
  return host;
}

// 16-bit values widened to float on the host, so conversions compare like
// the rest.
std::vector<float> widened(Backend& backend, const DeviceBuffer<uint16_t>& buffer, DType dtype) {
  std::vector<float> wide;
  for (const uint16_t bits : download(backend, buffer)) {
    wide.push_back(dtype == DType::kBF16 ? kernels::bf16_to_float(bits)
                                         : kernels::fp16_to_float(bits));
  }
  return wide;
}

double error_of(const Outputs& actual, const Outputs& expected) {
  if (actual.size() != expected.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t k = 0; k < actual.size(); ++k) {
    if (actual[k].size() != expected[k].size()) return std::numeric_limits<double>::infinity();
    double difference = 0, scale = 0;
    for (size_t i = 0; i < actual[k].size(); ++i) {
      const double a = actual[k][i], e = expected[k][i];
      if (std::isnan(a) != std::isnan(e)) return std::numeric_limits<double>::infinity();
      if (std::isnan(a) || (std::isinf(e) && a == e)) continue;
      difference = std::max(difference, std::abs(a - e));
      scale = std::max(scale, std::abs(e));
    }
    worst = std::max(worst, scale > 0 ? difference / scale : difference);
  }
  return worst;
}

struct Case {
  std::string kernel;
  std::string precision;
  double tolerance;
  std::function<Outputs(Backend&)> run;
};

std::string products(DType dtype) {
  return dtype == DType::kF32 ? "fp32" : std::string(core::dtype_name(dtype)) + " products";
}

// Products sum in other orders (tensor cores) than the CPU's, which costs
// about 1e-6. The 16-bit ones round both operands, and with the same inputs
// on both sides to the same values: a device that did not round them, or
// rounded them another way, would be off by about 1e-3 (bf16) or 1e-4
// (fp16), far past this.
constexpr double kProducts = 1e-5;
constexpr double kFp32 = 1e-5;

void add_embedding_and_norm_cases(Inputs& in, std::vector<Case>& all) {
  const auto tokens = in.ints(kN, kV);
  const auto wte = in.floats(kVp * kC), wpe = in.floats(kT * kC), dout = in.floats(kN * kC);
  const auto dwte0 = in.floats(kVp * kC), dwpe0 = in.floats(kT * kC);
  all.push_back({"encoder_forward + backward", "fp32", kFp32, [=](Backend& b) {
                   auto t = upload(b, tokens);
                   auto e = upload(b, wte), p = upload(b, wpe), dy = upload(b, dout);
                   auto de = upload(b, dwte0), dp = upload(b, dwpe0);
                   DeviceBuffer<float> out(b, kN * kC);
                   const Backend::VocabSlice slice{0, kVp};
                   b.encoder_forward(out.data(), t.data(), e.data(), slice, p.data(), kB, kT, kC);
                   b.encoder_backward(de.data(), slice, dp.data(), dy.data(), t.data(), kB, kT, kC);
                   return Outputs{download(b, out), download(b, de), download(b, dp)};
                 }});

  const auto x = in.floats(kN * kC, -2.0f, 2.0f), weight = in.floats(kC), bias = in.floats(kC);
  const auto dinp0 = in.floats(kN * kC), dweight0 = in.floats(kC), dbias0 = in.floats(kC);
  all.push_back({"layernorm_forward + backward", "fp32", 1e-4, [=](Backend& b) {
                   auto inp = upload(b, x), w = upload(b, weight), bi = upload(b, bias);
                   auto dy = upload(b, dout), di = upload(b, dinp0);
                   auto dw = upload(b, dweight0), db = upload(b, dbias0);
                   DeviceBuffer<float> out(b, kN * kC), mean(b, kN), rstd(b, kN);
                   b.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(),
                                       bi.data(), kN, kC);
                   b.layernorm_backward(di.data(), dw.data(), db.data(), dy.data(), inp.data(),
                                        w.data(), mean.data(), rstd.data(), kN, kC);
                   return Outputs{download(b, out), download(b, mean), download(b, rstd),
                                  download(b, di),  download(b, dw),   download(b, db)};
                 }});
}

void add_product_cases(Inputs& in, std::vector<Case>& all) {
  const auto inp = in.floats(kN * kC), weight = in.floats(kC * kOC), bias = in.floats(kOC);
  const auto dout = in.floats(kN * kOC), dinp0 = in.floats(kN * kC);
  const auto dweight0 = in.floats(kC * kOC), dbias0 = in.floats(kOC);
  const auto wte = in.floats(kVp * kC), dlogits = in.floats(kN * kVp);
  const auto dwte0 = in.floats(kVp * kC);
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    all.push_back(
        {"matmul_forward + backward", products(dtype), kProducts, [=](Backend& b) {
           b.set_matmul_precision(dtype);
           auto x = upload(b, inp), w = upload(b, weight), bi = upload(b, bias);
           auto dy = upload(b, dout), dx = upload(b, dinp0);
           auto dw = upload(b, dweight0), db = upload(b, dbias0);
           DeviceBuffer<float> out(b, kN * kOC);
           b.matmul_forward(out.data(), x.data(), w.data(), bi.data(), kN, kC, kOC);
           b.matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), kN, kC,
                             kOC);
           b.set_matmul_precision(DType::kF32);
           return Outputs{download(b, out), download(b, dx), download(b, dw), download(b, db)};
         }});
    all.push_back({"logits_forward + backward", products(dtype), kProducts, [=](Backend& b) {
                     b.set_matmul_precision(dtype);
                     auto x = upload(b, inp), e = upload(b, wte), dl = upload(b, dlogits);
                     auto dx = upload(b, dinp0), de = upload(b, dwte0);
                     DeviceBuffer<float> logits(b, kN * kVp);
                     b.logits_forward(logits.data(), x.data(), e.data(), kN, kC, kVp, kVp);
                     b.logits_backward(dx.data(), de.data(), dl.data(), x.data(), e.data(), kN, kC,
                                       kVp, kVp);
                     b.set_matmul_precision(DType::kF32);
                     return Outputs{download(b, logits), download(b, dx), download(b, de)};
                   }});
  }
  const auto qkv = in.floats(kN * 3 * kC), dqkv0 = in.floats(kN * 3 * kC);
  const auto datt_out = in.floats(kN * kC);
  all.push_back(
      {"attention_forward + backward", "fp32", 1e-4, [=](Backend& b) {
         auto q = upload(b, qkv), dq = upload(b, dqkv0), dy = upload(b, datt_out);
         DeviceBuffer<float> out(b, kN * kC),
             scratch(b, core::attention_scratch_floats(b.attention_scratch(), kB, kT));
         b.attention_forward(out.data(), scratch.data(), q.data(), kB, kT, kC, kNH);
         b.attention_backward(dq.data(), scratch.data(), dy.data(), q.data(), kB, kT, kC, kNH);
         return Outputs{download(b, out), download(b, dq)};
       }});
}

void add_elementwise_cases(Inputs& in, std::vector<Case>& all) {
  const int64_t n = kN * kOC;
  const auto x = in.floats(n, -4.0f, 4.0f), y = in.floats(n), dout = in.floats(n);
  const auto d0 = in.floats(n), d1 = in.floats(n);
  all.push_back({"gelu_forward + backward", "fp32", kFp32, [=](Backend& b) {
                   auto inp = upload(b, x), dy = upload(b, dout), dx = upload(b, d0);
                   DeviceBuffer<float> out(b, n);
                   b.gelu_forward(out.data(), inp.data(), n);
                   b.gelu_backward(dx.data(), inp.data(), dy.data(), n);
                   return Outputs{download(b, out), download(b, dx)};
                 }});
  all.push_back(
      {"residual, scale, fill", "fp32", 0, [=](Backend& b) {
         auto a = upload(b, x), c = upload(b, y), dy = upload(b, dout);
         auto da = upload(b, d0), dc = upload(b, d1);
         DeviceBuffer<float> out(b, n), filled(b, n);
         b.residual_forward(out.data(), a.data(), c.data(), n);
         b.residual_backward(da.data(), dc.data(), dy.data(), n);
         b.scale(da.data(), n, 0.37f);
         b.fill(filled.data(), n, -2.5f);
         return Outputs{download(b, out), download(b, da), download(b, dc), download(b, filled)};
       }});
  all.push_back({"sum_of_squares, mean", "fp32", 1e-6, [=](Backend& b) {
                   auto inp = upload(b, x);
                   DeviceBuffer<float> mean(b, 1);
                   b.mean(mean.data(), inp.data(), n);
                   const auto squares = static_cast<float>(b.sum_of_squares(inp.data(), n));
                   return Outputs{download(b, mean), {squares}};
                 }});
}

void add_cross_entropy_cases(Inputs& in, std::vector<Case>& all) {
  auto logits = in.floats(kN * kVp, -3.0f, 3.0f);
  for (int64_t row = 0; row < kN; ++row) {
    for (int64_t j = kV; j < kVp; ++j) logits[row * kVp + j] = 1000.0f;  // padding: ignored
  }
  const auto targets = in.ints(kN, kV);
  const auto dlosses = in.floats(kN), dlogits0 = in.floats(kN * kVp);
  all.push_back({"softmax_crossentropy_forward + backward", "fp32", kFp32, [=](Backend& b) {
                   auto l = upload(b, logits), d = upload(b, dlogits0);
                   auto t = upload(b, targets);
                   auto dl = upload(b, dlosses);
                   DeviceBuffer<float> probs(b, kN * kVp), losses(b, kN);
                   b.softmax_crossentropy_forward(probs.data(), losses.data(), l.data(), t.data(),
                                                  kN, kV, kVp);
                   b.crossentropy_softmax_backward(d.data(), dl.data(), probs.data(), t.data(), 0,
                                                   kN, kV, kVp);
                   return Outputs{download(b, probs), download(b, losses), download(b, d)};
                 }});
  // The vocabulary-parallel steps on the first half of the vocabulary, as
  // one rank of a tensor group of two sees it.
  const int64_t half = kVp / 2;
  std::vector<float> slice(kN * half);
  for (int64_t row = 0; row < kN; ++row) {
    std::copy_n(logits.begin() + row * kVp, half, slice.begin() + row * half);
  }
  all.push_back({"vocab_parallel_max, _sums, _softmax_loss", "fp32", kFp32, [=](Backend& b) {
                   auto l = upload(b, slice);
                   auto t = upload(b, targets);
                   DeviceBuffer<float> max(b, kN), sums(b, 2 * kN), probs(b, kN * half);
                   DeviceBuffer<float> losses(b, kN);
                   b.vocab_parallel_max(max.data(), l.data(), kN, half, half);
                   b.vocab_parallel_sums(sums.data(), l.data(), max.data(), t.data(), 0, kN, half,
                                         half);
                   b.vocab_parallel_softmax_loss(probs.data(), losses.data(), l.data(), max.data(),
                                                 sums.data(), kN, half, half);
                   return Outputs{download(b, max), download(b, sums), download(b, probs),
                                  download(b, losses)};
                 }});
}

void add_precision_cases(Inputs& in, std::vector<Case>& all) {
  const int64_t n = kC * kOC;
  const auto params = in.floats(n), grads = in.floats(n), m = in.floats(n, -0.1f, 0.1f);
  const auto v = in.floats(n, 0.0f, 0.01f);
  for (const DType copy : {DType::kF32, DType::kBF16, DType::kF16}) {
    const std::string precision =
        copy == DType::kF32 ? "fp32" : std::string(core::dtype_name(copy)) + " copy";
    all.push_back({"adamw_update", precision, 1e-6, [=](Backend& b) {
                     auto p = upload(b, params), g = upload(b, grads);
                     auto mm = upload(b, m), vv = upload(b, v);
                     DeviceBuffer<float> rounded(b, n);
                     Backend::AdamWParams hyper;
                     hyper.lr = 3e-3;
                     hyper.weight_decay = 0.1;
                     hyper.step = 7;
                     hyper.rounded_dtype = copy == DType::kF32 ? DType::kBF16 : copy;
                     b.adamw_update(p.data(), g.data(), mm.data(), vv.data(), n, hyper,
                                    copy == DType::kF32 ? nullptr : rounded.data());
                     Outputs out{download(b, p), download(b, mm), download(b, vv)};
                     if (copy != DType::kF32) out.push_back(download(b, rounded));
                     return out;
                   }});
  }
  // Across fp16's range and past it, and into its subnormals.
  auto values = in.floats(n, -70000.0f, 70000.0f);
  const auto small = in.floats(n, -1e-6f, 1e-6f);
  for (int64_t i = 0; i < n; i += 2) values[i] = small[i];
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    all.push_back(
        {"round_to, convert", std::string(core::dtype_name(dtype)), 0, [=](Backend& b) {
           auto x = upload(b, values);
           DeviceBuffer<float> rounded(b, n), back(b, n);
           DeviceBuffer<uint16_t> narrow(b, n);
           b.round_to(rounded.data(), x.data(), n, dtype);
           b.convert(narrow.data(), dtype, x.data(), DType::kF32, n);
           b.convert(back.data(), DType::kF32, narrow.data(), dtype, n);
           return Outputs{download(b, rounded), widened(b, narrow, dtype), download(b, back)};
         }});
  }
}

// Copies through page-locked host memory (offload_optimizer.pin_memory's).
// The source is overwritten as soon as copy_host_to_device() returns, as its
// contract allows: a copy from pinned memory that had not read it by then
// (asynchronous, and not waited for) brings NaNs back. Fills queued ahead
// of the copy make such a copy start late.
void add_copy_cases(Inputs& in, std::vector<Case>& all) {
  const int64_t n = kN * kOC;
  const auto x = in.floats(n);
  all.push_back({"copies through page-locked host memory", "fp32", 0, [=](Backend& b) {
                   std::vector<float> source = x;
                   std::vector<float> back(n);
                   const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
                   const kernels::PinnedHostMemory pinned_source(b, source.data(), bytes);
                   const kernels::PinnedHostMemory pinned_back(b, back.data(), bytes);
                   DeviceBuffer<float> on_device(b, n), busy(b, int64_t{1} << 18);
                   for (int i = 0; i < 4; ++i) b.fill(busy.data(), busy.size(), 1.0f);
                   b.copy_host_to_device(on_device.data(), source.data(), bytes);
                   std::fill(source.begin(), source.end(), std::numeric_limits<float>::quiet_NaN());
                   b.copy_device_to_host(back.data(), on_device.data(), bytes);
                   return Outputs{back};
                 }});
}

}  // namespace

std::vector<KernelCheck> check_kernels(Backend& device, Backend& reference, uint32_t seed) {
  Inputs inputs(seed);
  std::vector<Case> all;
  add_embedding_and_norm_cases(inputs, all);
  add_product_cases(inputs, all);
  add_elementwise_cases(inputs, all);
  add_cross_entropy_cases(inputs, all);
  add_precision_cases(inputs, all);
  add_copy_cases(inputs, all);
  std::vector<KernelCheck> checks;
  for (const Case& c : all) {
    const Outputs expected = c.run(reference);
    const Outputs actual = c.run(device);
    checks.push_back({c.kernel, c.precision, error_of(actual, expected), c.tolerance});
  }
  return checks;
}

}  // namespace dslaunch::worker::selftest
