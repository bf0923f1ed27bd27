// Lamb, 1-bit Adam, 0/1 Adam and 1-bit LAMB with DeepSpeed's semantics
// (FusedLamb, OnebitAdam, ZeroOneAdam, OnebitLamb): the same formulas,
// element by element in fp32, per parameter tensor where LAMB's trust ratio
// needs it. Weight decay applies where AdamW's does here (matrices and
// embeddings), not to biases and LayerNorm parameters. The element-wise loops
// run on the rank's compute threads (OpenMP); each element is computed on its
// own, so the results do not depend on the number of threads. Sums (norms)
// stay in one thread, in order.
#include "worker/engine/whole_model_optimizer.h"

#include <algorithm>
#include <cmath>

#include "worker/parallel/compressed_all_reduce.h"

namespace dslaunch::worker::engine {
namespace {

struct Tensor {
  int64_t begin, count;
  float decay;  // the weight decay this tensor takes
};

std::vector<Tensor> tensors_of(const core::ParameterTable& table, double weight_decay) {
  std::vector<Tensor> tensors;
  for (const core::TensorInfo& tensor : table.tensors()) {
    tensors.push_back({tensor.offset, tensor.numel,
                       tensor.weight_decay ? static_cast<float>(weight_decay) : 0.0f});
  }
  return tensors;
}

// m = β m + rest g and v = β v + rest g², as torch's mul_(β).add_(g,
// alpha=rest) and addcmul_ compute them.
void update_momentum(float* m, const float* g, int64_t n, float beta, float rest) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) m[i] = m[i] * beta + rest * g[i];
}
void update_variance(float* v, const float* g, int64_t n, float beta, float rest) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) v[i] = v[i] * beta + rest * g[i] * g[i];
}

// Adam's step without bias correction, as DeepSpeed's 1-bit optimizers take
// it: p -= lr (m / (sqrt(v) + eps) + decay p).
void adam_step(float* p, const float* m, const float* v, int64_t n, float lr, float eps,
               float decay) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float update = m[i] / (std::sqrt(v[i]) + eps) + decay * p[i];
    p[i] -= lr * update;
  }
}

double norm_of(kernels::Backend& backend, const float* x, int64_t n) {
  return std::sqrt(backend.sum_of_squares(x, n));
}

// LAMB's trust ratio ||w|| / ||update||, bounded; 1 where either is zero.
double trust_ratio(double weight_norm, double update_norm, double min_coeff, double max_coeff) {
  if (weight_norm == 0 || update_norm == 0) return 1.0;
  return std::clamp(weight_norm / update_norm, min_coeff, max_coeff);
}

class OptimizerBase : public WholeModelOptimizer {
 protected:
  OptimizerBase(const spec::OptimizerSpec& spec, const core::ParameterTable& table,
                kernels::Backend& backend)
      : spec_(spec),
        tensors_(tensors_of(table, spec.weight_decay)),
        total_(table.total()),
        backend_(backend),
        beta1_(static_cast<float>(spec.betas[0])),
        beta2_(static_cast<float>(spec.betas[1])),
        eps_(static_cast<float>(spec.eps)),
        // DeepSpeed's 1-bit optimizers pass 1 - β from Python (a double,
        // rounded once); FusedLamb's kernel takes 1 - β in float.
        rest1_(spec.type == spec::OptimizerType::kLamb ? 1.0f - beta1_
                                                       : static_cast<float>(1.0 - spec.betas[0])),
        rest2_(spec.type == spec::OptimizerType::kLamb ? 1.0f - beta2_
                                                       : static_cast<float>(1.0 - spec.betas[1])),
        m_(total_, 0.0f),
        v_(total_, 0.0f) {}

  int64_t state_bytes() const override { return bytes_of(m_) + bytes_of(v_); }
  template <typename T>
  static int64_t bytes_of(const std::vector<T>& values) {
    return static_cast<int64_t>(values.size() * sizeof(T));
  }
  static int64_t error_bytes(const CompressedAllReduce& reduce) {
    return bytes_of(reduce.worker_error()) + bytes_of(reduce.server_error());
  }

  static std::vector<OptimizerArray> error_arrays(CompressedAllReduce& reduce) {
    std::vector<float>& worker = reduce.worker_error();
    std::vector<float>& server = reduce.server_error();
    return {{"worker_error", core::DType::kF32, static_cast<int64_t>(worker.size()), worker.data(),
             true},
            {"server_error", core::DType::kF32, static_cast<int64_t>(server.size()), server.data(),
             true}};
  }
  // Each tensor compressed with scales of its own, as DeepSpeed compresses
  // each parameter of an fp32 model: the table's tensors lie one after the
  // other from element 0, as the compressed all-reduce's segments must.
  std::vector<int64_t> tensor_sizes() const {
    std::vector<int64_t> sizes;
    for (const Tensor& tensor : tensors_) sizes.push_back(tensor.count);
    return sizes;
  }

  const spec::OptimizerSpec spec_;
  const std::vector<Tensor> tensors_;
  const int64_t total_;
  kernels::Backend& backend_;
  const float beta1_, beta2_, eps_;
  const float rest1_, rest2_;  // 1 - β1, 1 - β2
  std::vector<float> m_, v_;
};

// FusedLamb: Adam's moments, the step size bias-corrected, and each tensor's
// update scaled by its trust ratio ||p|| / ||m / denom + decay p||.
class Lamb final : public OptimizerBase {
 public:
  Lamb(const spec::OptimizerSpec& spec, const core::ParameterTable& table,
       kernels::Backend& backend)
      : OptimizerBase(spec, table, backend) {}

  bool averages_gradients(int64_t) const override { return true; }

  core::Status step(float* params, float* grads, double lr) override {
    const int64_t t = ++steps_;
    double step_size = lr;
    if (spec_.bias_correction) {
      step_size =
          lr * std::sqrt(1 - std::pow(spec_.betas[1], t)) / (1 - std::pow(spec_.betas[0], t));
    }
    for (const Tensor& tensor : tensors_) {
      float* p = params + tensor.begin;
      const float* g = grads + tensor.begin;
      float* m = m_.data() + tensor.begin;
      float* v = v_.data() + tensor.begin;
      update_momentum(m, g, tensor.count, beta1_, rest1_);
      update_variance(v, g, tensor.count, beta2_, rest2_);
      const auto update = [&](int64_t i) {
        const float denom = spec_.eps_inside_sqrt ? std::sqrt(v[i] + eps_) : std::sqrt(v[i]) + eps_;
        return m[i] / denom + tensor.decay * p[i];
      };
      double update_squares = 0;
      for (int64_t i = 0; i < tensor.count; ++i) {
        const double u = update(i);
        update_squares += u * u;
      }
      const double coeff = trust_ratio(norm_of(backend_, p, tensor.count),
                                       std::sqrt(update_squares), spec_.min_coeff, spec_.max_coeff);
      const float scale = static_cast<float>(step_size * coeff);
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < tensor.count; ++i) p[i] -= scale * update(i);
    }
    return {};
  }

  std::vector<std::pair<core::StateKind, float*>> layout_state() override {
    return {{core::StateKind::kAdamM, m_.data()}, {core::StateKind::kAdamV, v_.data()}};
  }
};

// OnebitAdam: Adam (no bias correction) on averaged gradients for
// freeze_step steps; then the variance freezes, and each rank's momentum,
// updated with its own gradients, is averaged compressed.
class OneBitAdam final : public OptimizerBase {
 public:
  OneBitAdam(const spec::OptimizerSpec& spec, const core::ParameterTable& table,
             comm::Communicator& data, kernels::Backend& backend)
      : OptimizerBase(spec, table, backend), reduce_(data, backend, tensor_sizes()) {}

  bool averages_gradients(int64_t step) const override { return step <= spec_.freeze_step; }
  bool compressed_last_step() const override { return steps_ > spec_.freeze_step; }

  core::Status step(float* params, float* grads, double lr) override {
    const int64_t t = ++steps_;
    update_momentum(m_.data(), grads, total_, beta1_, rest1_);
    if (t <= spec_.freeze_step) {
      update_variance(v_.data(), grads, total_, beta2_, rest2_);
    } else if (core::Status status = reduce_.average(m_.data()); !status.ok()) {
      return status;
    }
    for (const Tensor& tensor : tensors_) {
      adam_step(params + tensor.begin, m_.data() + tensor.begin, v_.data() + tensor.begin,
                tensor.count, static_cast<float>(lr), eps_, tensor.decay);
    }
    return {};
  }

  std::vector<std::pair<core::StateKind, float*>> layout_state() override {
    return {{core::StateKind::kAdamM, m_.data()}, {core::StateKind::kAdamV, v_.data()}};
  }
  std::vector<OptimizerArray> rank_arrays() override { return error_arrays(reduce_); }
  void restart_error_feedback() override { reduce_.reset_errors(); }
  int64_t state_bytes() const override {
    return OptimizerBase::state_bytes() + error_bytes(reduce_);
  }
  int64_t buffer_bytes() const override { return reduce_.buffer_bytes(); }

 private:
  CompressedAllReduce reduce_;
};

// ZeroOneAdam: the variance is updated only at steps whose gradients are
// averaged at full precision, at intervals that double every
// var_update_scaler updates (the other steps average the gradients
// compressed); after var_freeze_step the variance freezes and ranks take
// local steps, synchronising their accumulated updates compressed every
// local_step_interval steps, an interval that doubles every
// local_step_scaler steps up to local_step_clipper.
//
// DeepSpeed subtracts the local updates from the weights again before a
// synchronisation, which leaves each rank its own rounding; here the
// synchronised weights are kept apart (one more copy of the model), so
// every rank returns to exactly the same weights at each synchronisation.
class ZeroOneAdam final : public OptimizerBase {
 public:
  ZeroOneAdam(const spec::OptimizerSpec& spec, const core::ParameterTable& table,
              comm::Communicator& data, kernels::Backend& backend)
      : OptimizerBase(spec, table, backend), reduce_(data, backend, tensor_sizes()) {}

  bool averages_gradients(int64_t step) const override {
    return !frozen_ && step % var_interval_ == 0;
  }
  bool compressed_last_step() const override { return compressed_; }

  core::Status step(float* params, float* grads, double lr) override {
    const int64_t t = ++steps_;
    const float rate = static_cast<float>(lr);
    compressed_ = false;
    if (!frozen_) {
      const bool full = t % var_interval_ == 0;
      if (full) {
        update_variance(v_.data(), grads, total_, beta2_, rest2_);
      } else {
        if (core::Status status = reduce_.average(grads); !status.ok()) return status;
        compressed_ = true;
      }
      update_momentum(m_.data(), grads, total_, beta1_, rest1_);
      for (const Tensor& tensor : tensors_) {
        adam_step(params + tensor.begin, m_.data() + tensor.begin, v_.data() + tensor.begin,
                  tensor.count, rate, eps_, tensor.decay);
      }
      if (full && ++var_counter_ == spec_.var_update_scaler) {
        var_counter_ = 0;
        var_interval_ *= 2;
      }
      if (t > spec_.var_freeze_step) freeze(params);
      return {};
    }
    update_momentum(m_.data(), grads, total_, beta1_, rest1_);
    lrs_ += lr;
    float* u = accumulated_.data();
    for (const Tensor& tensor : tensors_) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = tensor.begin; i < tensor.begin + tensor.count; ++i) {
        const float update = m_[i] / (std::sqrt(v_[i]) + eps_) + tensor.decay * params[i];
        u[i] += -rate * update;
        params[i] = synchronized_[i] + u[i];
      }
    }
    if (t % local_step_interval_ == 0) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < total_; ++i) u[i] *= std::sqrt(v_[i]) + eps_;
      if (core::Status status = reduce_.average(u); !status.ok()) return status;
      compressed_ = true;
      const float inverse_lrs = static_cast<float>(1.0 / lrs_);
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < total_; ++i) {
        m_[i] = -(u[i] * inverse_lrs);
        synchronized_[i] += u[i] / (std::sqrt(v_[i]) + eps_);
        params[i] = synchronized_[i];
        u[i] = 0.0f;
      }
      lrs_ = 0;
    }
    if (++local_step_counter_ == spec_.local_step_scaler) {
      local_step_counter_ = 0;
      local_step_interval_ = std::min(spec_.local_step_clipper, local_step_interval_ * 2);
    }
    return {};
  }

  std::vector<std::pair<core::StateKind, float*>> layout_state() override {
    return {{core::StateKind::kAdamM, m_.data()}, {core::StateKind::kAdamV, v_.data()}};
  }
  const float* synchronized_parameters() const override {
    return frozen_ ? synchronized_.data() : nullptr;
  }
  std::map<std::string, double> scalars() const override {
    return {{"frozen", frozen_ ? 1.0 : 0.0},
            {"var_interval", static_cast<double>(var_interval_)},
            {"var_counter", static_cast<double>(var_counter_)},
            {"local_step_interval", static_cast<double>(local_step_interval_)},
            {"local_step_counter", static_cast<double>(local_step_counter_)},
            {"lrs", lrs_}};
  }
  // None given (a checkpoint of another optimizer, or of another layout):
  // the schedule replayed from the step count, a new local period begun.
  void set_scalars(const std::map<std::string, double>& scalars) override {
    const auto value = [&scalars](const char* name, double fallback) {
      const auto found = scalars.find(name);
      return found == scalars.end() ? fallback : found->second;
    };
    if (scalars.empty()) {
      replay_schedule();
    } else {
      var_interval_ = static_cast<int64_t>(value("var_interval", 1));
      var_counter_ = static_cast<int64_t>(value("var_counter", 0));
      local_step_interval_ = static_cast<int64_t>(value("local_step_interval", 1));
      local_step_counter_ = static_cast<int64_t>(value("local_step_counter", 0));
      frozen_ = value("frozen", 0) != 0;
    }
    lrs_ = value("lrs", 0);
    if (frozen_) {
      synchronized_.assign(total_, 0.0f);
      accumulated_.assign(total_, 0.0f);
    }
  }
  std::vector<OptimizerArray> rank_arrays() override {
    std::vector<OptimizerArray> arrays = error_arrays(reduce_);
    // Between synchronisations each rank has its own momentum and updates.
    arrays.push_back({"exp_avg", core::DType::kF32, total_, m_.data(), true});
    arrays.push_back({"momentum_accumulator", core::DType::kF32,
                      static_cast<int64_t>(accumulated_.size()), accumulated_.data(), true});
    return arrays;
  }
  void restart_error_feedback() override {
    reduce_.reset_errors();
    std::fill(accumulated_.begin(), accumulated_.end(), 0.0f);
    lrs_ = 0;
  }
  int64_t state_bytes() const override {
    return OptimizerBase::state_bytes() + error_bytes(reduce_) + bytes_of(synchronized_) +
           bytes_of(accumulated_);
  }
  int64_t buffer_bytes() const override { return reduce_.buffer_bytes(); }
  // The checkpoint's parameters are the synchronised ones; each rank's
  // drift since is its accumulated updates.
  void resumed(float* params) override {
    if (!frozen_) return;
    synchronized_.assign(params, params + total_);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < total_; ++i) params[i] = synchronized_[i] + accumulated_[i];
  }

 private:
  // The intervals and counters step() leaves after steps_ steps.
  void replay_schedule() {
    frozen_ = false;
    var_interval_ = 1;
    var_counter_ = 0;
    local_step_interval_ = 1;
    local_step_counter_ = 0;
    for (int64_t t = 1; t <= steps_; ++t) {
      if (!frozen_) {
        if (t % var_interval_ == 0 && ++var_counter_ == spec_.var_update_scaler) {
          var_counter_ = 0;
          var_interval_ *= 2;
        }
        frozen_ = t > spec_.var_freeze_step;
      } else if (++local_step_counter_ == spec_.local_step_scaler) {
        local_step_counter_ = 0;
        local_step_interval_ = std::min(spec_.local_step_clipper, local_step_interval_ * 2);
      }
    }
  }

  void freeze(const float* params) {
    frozen_ = true;
    synchronized_.assign(params, params + total_);
    accumulated_.assign(total_, 0.0f);
    // DeepSpeed starts the compressed phase with clear error buffers.
    reduce_.reset_errors();
  }

  CompressedAllReduce reduce_;
  bool frozen_ = false;
  bool compressed_ = false;
  int64_t var_interval_ = 1;
  int64_t var_counter_ = 0;
  int64_t local_step_interval_ = 1;
  int64_t local_step_counter_ = 0;
  double lrs_ = 0;  // the learning rates since the last synchronisation, summed
  std::vector<float> synchronized_;
  std::vector<float> accumulated_;  // DeepSpeed's momentum_accumulator
};

// OnebitLamb: LAMB (no bias correction) on averaged gradients for
// freeze_step steps, tracking each tensor's trust ratio in an exponential
// average (coeff_beta); then the momentum, scaled per tensor to a common
// magnitude, is averaged compressed, the variance frozen, and each tensor's
// step uses the frozen ratio times a factor from a fresh variance
// reconstructed from the momentum's change (bounded by factor_min,
// factor_max and a change of at most factor_threshold per step).
class OneBitLamb final : public OptimizerBase {
 public:
  OneBitLamb(const spec::OptimizerSpec& spec, const core::ParameterTable& table,
             comm::Communicator& data, kernels::Backend& backend)
      : OptimizerBase(spec, table, backend),
        // One flat buffer, as DeepSpeed's: the momentum is scaled per tensor
        // to a common magnitude before it is compressed.
        reduce_(data, backend, {total_}),
        fresh_v_(total_, 0.0f),
        coeff_freeze_(tensors_.size(), 0.0),
        last_factor_(tensors_.size(), 1.0),
        scaling_(tensors_.size(), 0.0) {}

  bool averages_gradients(int64_t step) const override { return step <= spec_.freeze_step; }
  bool compressed_last_step() const override { return steps_ > spec_.freeze_step; }

  core::Status step(float* params, float* grads, double lr) override {
    const int64_t t = ++steps_;
    if (t <= spec_.freeze_step) {
      warm_up_step(params, grads, lr, t);
      return {};
    }
    return compressed_step(params, grads, lr);
  }

  std::vector<std::pair<core::StateKind, float*>> layout_state() override {
    return {{core::StateKind::kAdamM, m_.data()},
            {core::StateKind::kAdamV, v_.data()},
            {core::StateKind::kFreshVariance, fresh_v_.data()}};
  }
  std::map<std::string, double> scalars() const override {
    return {{"scaling_ready", scaling_ready_ ? 1.0 : 0.0}};
  }
  void set_scalars(const std::map<std::string, double>& scalars) override {
    const auto found = scalars.find("scaling_ready");
    scaling_ready_ = found != scalars.end() && found->second != 0;
  }
  std::vector<OptimizerArray> rank_arrays() override {
    std::vector<OptimizerArray> arrays = error_arrays(reduce_);
    const int64_t n = static_cast<int64_t>(tensors_.size());
    arrays.push_back({"lamb_coeff_freeze", core::DType::kF64, n, coeff_freeze_.data(), false});
    arrays.push_back({"last_factor", core::DType::kF64, n, last_factor_.data(), false});
    arrays.push_back({"scaling_coeff", core::DType::kF64, n, scaling_.data(), false});
    return arrays;
  }
  void restart_error_feedback() override { reduce_.reset_errors(); }
  int64_t state_bytes() const override {
    return OptimizerBase::state_bytes() + error_bytes(reduce_) + bytes_of(fresh_v_) +
           bytes_of(last_m_) + bytes_of(coeff_freeze_) + bytes_of(last_factor_) +
           bytes_of(scaling_);
  }
  int64_t buffer_bytes() const override { return reduce_.buffer_bytes(); }

 private:
  void warm_up_step(float* params, const float* grads, double lr, int64_t t) {
    update_momentum(m_.data(), grads, total_, beta1_, rest1_);
    update_variance(v_.data(), grads, total_, beta2_, rest2_);
    if (t == spec_.freeze_step) fresh_v_ = v_;
    for (size_t k = 0; k < tensors_.size(); ++k) {
      const Tensor& tensor = tensors_[k];
      float* p = params + tensor.begin;
      const float* m = m_.data() + tensor.begin;
      const float* v = v_.data() + tensor.begin;
      const auto update = [&](int64_t i) {
        return m[i] / (std::sqrt(v[i]) + eps_) + tensor.decay * p[i];
      };
      double update_squares = 0;
      for (int64_t i = 0; i < tensor.count; ++i) {
        const double u = update(i);
        update_squares += u * u;
      }
      const double coeff = trust_ratio(norm_of(backend_, p, tensor.count),
                                       std::sqrt(update_squares), spec_.min_coeff, spec_.max_coeff);
      if (coeff != 1.0) {
        coeff_freeze_[k] = spec_.coeff_beta * coeff_freeze_[k] + (1 - spec_.coeff_beta) * coeff;
      }
      const float scale = static_cast<float>(lr * coeff);
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < tensor.count; ++i) p[i] -= scale * update(i);
    }
  }

  core::Status compressed_step(float* params, const float* grads, double lr) {
    if (!scaling_ready_) {
      // Each tensor's momentum scaled to the tensors' mean magnitude, so one
      // compression scale suits them all.
      std::vector<double> scales;
      double mean = 0;
      for (const Tensor& tensor : tensors_) {
        scales.push_back(norm_of(backend_, m_.data() + tensor.begin, tensor.count) /
                         std::sqrt(static_cast<double>(tensor.count)));
        mean += scales.back();
      }
      mean /= static_cast<double>(tensors_.size());
      for (size_t k = 0; k < tensors_.size(); ++k) {
        scaling_[k] = scales[k] > 0 ? mean / scales[k] : 1.0;
      }
      scaling_ready_ = true;
    }
    last_m_ = m_;
    for (size_t k = 0; k < tensors_.size(); ++k) {
      const Tensor& tensor = tensors_[k];
      float* m = m_.data() + tensor.begin;
      update_momentum(m, grads + tensor.begin, tensor.count, beta1_, rest1_);
      const float scaling = static_cast<float>(scaling_[k]);
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < tensor.count; ++i) m[i] *= scaling;
    }
    if (core::Status status = reduce_.average(m_.data()); !status.ok()) return status;
    for (size_t k = 0; k < tensors_.size(); ++k) {
      const Tensor& tensor = tensors_[k];
      float* p = params + tensor.begin;
      float* m = m_.data() + tensor.begin;
      const float* last = last_m_.data() + tensor.begin;
      const float* v = v_.data() + tensor.begin;
      float* fresh = fresh_v_.data() + tensor.begin;
      // torch divides by a scalar as a multiplication by its reciprocal.
      const float unscaling = static_cast<float>(1.0 / scaling_[k]);
      double update_squares = 0, prelim_squares = 0, factor = 0;
      for (int64_t i = 0; i < tensor.count; ++i) {
        m[i] *= unscaling;
        const float reconstructed = (m[i] - last[i] * beta1_) / rest1_;
        fresh[i] = fresh[i] * beta2_ + rest2_ * reconstructed * reconstructed;
        const float denom = std::sqrt(v[i]) + eps_;
        const double prelim = m[i] / denom;
        const double update = static_cast<float>(prelim) + tensor.decay * p[i];
        prelim_squares += prelim * prelim;
        update_squares += update * update;
        factor = std::max<double>(factor, denom / (std::sqrt(fresh[i]) + eps_));
      }
      if (tensor.decay > 0 && update_squares > 0) {
        const double ratio = std::min(1.0, std::sqrt(prelim_squares / update_squares));
        factor = factor * ratio + (1.0 - ratio);
      }
      factor = std::clamp(factor, spec_.factor_min, spec_.factor_max);
      factor = std::clamp(factor, last_factor_[k] * (1.0 - spec_.factor_threshold),
                          last_factor_[k] * (1.0 + spec_.factor_threshold));
      last_factor_[k] = factor;
      const float scale = static_cast<float>(lr * coeff_freeze_[k] * factor);
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < tensor.count; ++i) {
        p[i] -= scale * (m[i] / (std::sqrt(v[i]) + eps_) + tensor.decay * p[i]);
      }
    }
    return {};
  }

  CompressedAllReduce reduce_;
  std::vector<float> fresh_v_;
  std::vector<float> last_m_;  // the momentum before this step's update
  std::vector<double> coeff_freeze_;
  std::vector<double> last_factor_;
  std::vector<double> scaling_;
  bool scaling_ready_ = false;
};

}  // namespace

std::unique_ptr<WholeModelOptimizer> make_whole_model_optimizer(const spec::OptimizerSpec& spec,
                                                                const core::ParameterTable& table,
                                                                comm::Communicator& data,
                                                                kernels::Backend& backend) {
  switch (spec.type) {
    case spec::OptimizerType::kLamb:
      return std::make_unique<Lamb>(spec, table, backend);
    case spec::OptimizerType::kOneBitAdam:
      return std::make_unique<OneBitAdam>(spec, table, data, backend);
    case spec::OptimizerType::kZeroOneAdam:
      return std::make_unique<ZeroOneAdam>(spec, table, data, backend);
    case spec::OptimizerType::kOneBitLamb:
      return std::make_unique<OneBitLamb>(spec, table, data, backend);
    default:
      return nullptr;
  }
}

}  // namespace dslaunch::worker::engine
