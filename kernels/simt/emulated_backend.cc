#include "kernels/simt/emulated_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "kernels/allocation_tally.h"
#include "kernels/cpu/rounded_gemm.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/host_sparse_memory.h"
#include "kernels/simt/guarded_memory.h"
#include "kernels/simt/simt_backend.h"

namespace dslaunch::kernels::simt {
namespace {

// Launches run to completion on the calling thread: a stream's order is
// program order, and events need no state.
class EmulatedStream final : public Stream {};
class EmulatedEvent final : public Event {};

class EmulatedBackend final : public SimtBackend<EmulatedBackend> {
 public:
  EmulatedBackend(const Schedule& schedule, DeviceMemory memory)
      : schedule_(schedule),
        guarded_(memory == DeviceMemory::kGuarded ? std::make_unique<GuardedMemory>() : nullptr) {}
  ~EmulatedBackend() override { deallocate(scratch_); }

  std::string name() const override { return "emulated (the CUDA kernels on the CPU emulator)"; }
  bool memory_is_host() const override { return guarded_ == nullptr; }

  void* allocate(int64_t bytes) override {
    void* data = nullptr;
    if (guarded_) {
      data = guarded_->allocate(bytes);
    } else {
      const size_t rounded = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
      data = std::aligned_alloc(64, rounded);
      if (data == nullptr) throw std::bad_alloc();
    }
    tally_.add(data, bytes);
    return data;
  }
  void deallocate(void* data) override {
    tally_.remove(data);
    if (guarded_) {
      guarded_->deallocate(data);
    } else {
      std::free(data);
    }
  }
  int64_t peak_allocated_bytes() const override { return tally_.peak(); }
  std::unique_ptr<SparseMemory> reserve_sparse(int64_t bytes) override {
    return guarded_ ? guarded_->reserve_sparse(bytes, tally_)
                    : make_host_sparse_memory(bytes, tally_);
  }
  void copy_host_to_device(void* device, const void* host, int64_t bytes) override {
    if (bytes <= 0) return;
    require_device(device, bytes, "copy_host_to_device's destination");
    inside([&] { std::memcpy(device, host, static_cast<size_t>(bytes)); });
  }
  void copy_device_to_host(void* host, const void* device, int64_t bytes) override {
    if (bytes <= 0) return;
    require_device(device, bytes, "copy_device_to_host's source");
    inside([&] { std::memcpy(host, device, static_cast<size_t>(bytes)); });
  }
  void copy_device_to_device(void* to, const void* from, int64_t bytes) override {
    if (bytes <= 0) return;
    require_device(to, bytes, "copy_device_to_device's destination");
    require_device(from, bytes, "copy_device_to_device's source");
    inside([&] { std::memmove(to, from, static_cast<size_t>(bytes)); });
  }
  void memset_zero(void* device, int64_t bytes) override {
    if (bytes <= 0) return;
    require_device(device, bytes, "memset_zero's destination");
    inside([&] { std::memset(device, 0, static_cast<size_t>(bytes)); });
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
    inside([&] {
      emulate_launch(kernel.shape(), schedule_, [&kernel](EmulatedThread& t) { kernel(t); });
    });
  }
  void run_gemm(const RowMajorGemm& product, const float* A, const float* B, float* C) {
    inside([&] {
      if (rounded_) {
        rounded_->run(product, A, B, C);
      } else {
        cpu::sgemm(product, A, B, C);
      }
    });
  }
  // In the backend's memory, as a GPU's scratch is.
  double* scratch_doubles(int64_t count) {
    if (count > scratch_count_) {
      deallocate(scratch_);
      scratch_ = nullptr;
      scratch_ = static_cast<double*>(allocate(count * static_cast<int64_t>(sizeof(double))));
      scratch_count_ = count;
    }
    return scratch_;
  }

  // Runs f with the device memory open to the host (guarded memory only).
  template <class F>
  void inside(const F& f) {
    if (!guarded_) return f();
    const GuardedMemory::Scope open(*guarded_);
    f();
  }
  void require_device(const void* data, int64_t bytes, const char* what) const {
    if (guarded_ && !guarded_->holds(data, bytes)) {
      throw std::invalid_argument(std::string(what) + " is not the backend's memory");
    }
  }

  Schedule schedule_;
  std::unique_ptr<GuardedMemory> guarded_;  // null: host memory
  double* scratch_ = nullptr;               // partial sums, grown as needed
  int64_t scratch_count_ = 0;
  std::unique_ptr<cpu::RoundedGemm> rounded_;
  AllocationTally tally_;
};

}  // namespace

std::unique_ptr<Backend> make_emulated_backend(const Schedule& schedule, DeviceMemory memory) {
  return std::make_unique<EmulatedBackend>(schedule, memory);
}

}  // namespace dslaunch::kernels::simt
