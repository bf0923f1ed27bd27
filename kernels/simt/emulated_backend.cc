#include "kernels/simt/emulated_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "kernels/cpu/rounded_gemm.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/simt/simt_backend.h"

namespace dslaunch::kernels::simt {
namespace {

// Launches run to completion on the calling thread: a stream's order is
// program order, and events need no state.
class EmulatedStream final : public Stream {};
class EmulatedEvent final : public Event {};

class EmulatedBackend final : public SimtBackend<EmulatedBackend> {
 public:
  explicit EmulatedBackend(const Schedule& schedule) : schedule_(schedule) {}

  std::string name() const override { return "emulated (the CUDA kernels on the CPU emulator)"; }

  void* allocate(int64_t bytes) override {
    const size_t rounded = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
    void* data = std::aligned_alloc(64, rounded);
    if (data == nullptr) throw std::bad_alloc();
    return data;
  }
  void deallocate(void* data) override { std::free(data); }
  void copy_host_to_device(void* device, const void* host, int64_t bytes) override {
    if (bytes > 0) std::memcpy(device, host, static_cast<size_t>(bytes));
  }
  void copy_device_to_host(void* host, const void* device, int64_t bytes) override {
    if (bytes > 0) std::memcpy(host, device, static_cast<size_t>(bytes));
  }
  void copy_device_to_device(void* to, const void* from, int64_t bytes) override {
    if (bytes > 0) std::memmove(to, from, static_cast<size_t>(bytes));
  }
  void memset_zero(void* device, int64_t bytes) override {
    if (bytes > 0) std::memset(device, 0, static_cast<size_t>(bytes));
  }

  std::unique_ptr<Stream> create_stream() override { return std::make_unique<EmulatedStream>(); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<EmulatedEvent>(); }
  void set_stream(Stream*) override {}
  void record(Event&) override {}
  void wait(Event&) override {}
  void synchronize(Event&) override {}
  void synchronize() override {}

  // As the CPU backend: 16-bit products round their operands (RoundedGemm),
  // which is what cuBLAS's 32F_FAST_16BF/16F compute types do.
  void set_matmul_precision(core::DType dtype) override {
    if (dtype == core::DType::kF32) {
      rounded_.reset();
    } else if (!rounded_ || rounded_->dtype() != dtype) {
      rounded_ = std::make_unique<cpu::RoundedGemm>(dtype);
    }
  }
  std::string matmul_kernel() const override {
    return rounded_ ? rounded_->kernel_name() : "OpenBLAS sgemm";
  }

 private:
  friend class SimtBackend<EmulatedBackend>;

  template <class Kernel>
  void launch_kernel(const Kernel& kernel) {
    emulate_launch(kernel.shape(), schedule_, [&kernel](EmulatedThread& t) { kernel(t); });
  }
  void run_gemm(const RowMajorGemm& product, const float* A, const float* B, float* C,
                bool at_matmul_precision) {
    if (at_matmul_precision && rounded_) {
      rounded_->run(product, A, B, C);
    } else {
      cpu::sgemm(product, A, B, C);
    }
  }
  double* scratch_doubles(int64_t count) {
    if (static_cast<int64_t>(scratch_.size()) < count) scratch_.resize(count);
    return scratch_.data();
  }

  Schedule schedule_;
  std::vector<double> scratch_;
  std::unique_ptr<cpu::RoundedGemm> rounded_;
};

}  // namespace

std::unique_ptr<Backend> make_emulated_backend(const Schedule& schedule) {
  return std::make_unique<EmulatedBackend>(schedule);
}

}  // namespace dslaunch::kernels::simt
