// The CUDA backend: kernels/backend.h on one GPU. The kernels are
// SimtBackend's (kernels/simt), the same code the emulated backend runs on
// the CPU in the tests; the products are the shared descriptors on cuBLAS,
// those with 16-bit operands in staged tiles (kernels/rounded_gemm_tiles.h).
// Compiled with --fmad=false (BUILD.bazel) so the AdamW element rounds as
// the CPU backend's does.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/allocation_tally.h"
#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_sparse_memory.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_thread.cuh"
#include "kernels/host_ranges.h"
#include "kernels/memory_reclaimers.h"
#include "kernels/rounded_gemm_tiles.h"
#include "kernels/simt/simt_backend.h"

namespace dslaunch::kernels::cuda {
namespace {

using simt::SimtBackend;

class CudaStream final : public Stream {
 public:
  CudaStream() : owned_(true) {
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  }
  // Another library's (borrow_stream()).
  explicit CudaStream(cudaStream_t borrowed) : stream(borrowed), owned_(false) {}
  ~CudaStream() override {
    if (owned_) cudaStreamDestroy(stream);
  }
  cudaStream_t stream = nullptr;

 private:
  bool owned_;
};

class CudaEvent final : public Event {
 public:
  CudaEvent() { check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "event"); }
  ~CudaEvent() override { cudaEventDestroy(event); }
  cudaEvent_t event = nullptr;
};

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(status));
  }
}

class CudaBackend final : public SimtBackend<CudaBackend> {
 public:
  explicit CudaBackend(int device) : device_(device) {
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
      throw std::runtime_error(
          "no CUDA driver on this machine (no NVIDIA GPU, or its driver "
          "is not installed)");
    }
    int count = 0;
    check_cuda(cudaGetDeviceCount(&count), "counting CUDA devices");
    if (device < 0 || device >= count) {
      throw std::runtime_error("no CUDA device " + std::to_string(device) + " (" +
                               std::to_string(count) + " visible)");
    }
    check_cuda(cudaSetDevice(device), "selecting the CUDA device");
    cudaDeviceProp props{};
    check_cuda(cudaGetDeviceProperties(&props, device), "reading the device's properties");
    name_ = "cuda:" + std::to_string(device) + " (" + props.name + ")";
    check_cublas(cublasCreate(&cublas_), "creating the cuBLAS handle");
  }
  ~CudaBackend() override {
    deallocate(scratch_);
    deallocate(staging_);
    cublasDestroy(cublas_);
  }

  std::string name() const override { return name_; }
  bool memory_is_host() const override { return false; }

  void* allocate(int64_t bytes) override {
    void* data = nullptr;
    // cudaMalloc aligns to 256 bytes, more than the 64 promised.
    const auto size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
    if (cudaMalloc(&data, size) != cudaSuccess) {
      cudaGetLastError();  // clear the error, so the next call does not report it
      // Sparse pages released in stream order may hold the room still.
      if (reclaimers_.reclaim_all() == 0 || cudaMalloc(&data, size) != cudaSuccess) {
        cudaGetLastError();
        throw std::bad_alloc();
      }
    }
    tally_.add(data, bytes);
    return data;
  }
  // Never throws: it runs in destructors (DeviceBuffer's), also while an
  // exception unwinds. cudaFree fails only after an earlier error, which was
  // reported where it happened.
  void deallocate(void* data) override {
    tally_.remove(data);
    if (data != nullptr) cudaFree(data);
  }
  int64_t peak_allocated_bytes() const override { return tally_.peak(); }
  std::unique_ptr<SparseMemory> reserve_sparse(int64_t bytes) override {
    return make_cuda_sparse_memory(
        bytes, tally_, [this] { return static_cast<void*>(stream_); }, reclaimers_);
  }
  bool pin_host_memory(const void* host, int64_t bytes) override {
    // (cudaHostRegister refuses an overlap too, with an error to clear.)
    if (pinned_.touches(host, bytes)) return false;
    // (cudaHostRegister takes a pointer to non-const; it writes nothing.)
    if (cudaHostRegister(const_cast<void*>(host), static_cast<size_t>(bytes),
                         cudaHostRegisterDefault) != cudaSuccess) {
      cudaGetLastError();  // clear the error: the copies stay pageable
      return false;
    }
    pinned_.add(host, bytes);
    return true;
  }
  void unpin_host_memory(const void* host) override {
    if (pinned_.remove(host) && cudaHostUnregister(const_cast<void*>(host)) != cudaSuccess) {
      cudaGetLastError();
    }
  }
  void copy_host_to_device(void* device, const void* host, int64_t bytes) override {
    if (bytes <= 0) return;
    check_cuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_), "copy");
    // From page-locked memory the copy returns before it has read the host
    // bytes; the contract is that they are read. (From pageable memory the
    // driver may wait for the stream as well, to stage the bytes.)
    if (pinned_.touches(host, bytes)) {
      check_cuda(cudaStreamSynchronize(stream_), "copy from page-locked host memory");
    }
  }
  void copy_device_to_host(void* host, const void* device, int64_t bytes) override {
    if (bytes <= 0) return;
    check_cuda(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_), "copy");
    check_cuda(cudaStreamSynchronize(stream_), "copy to the host");
  }
  void copy_device_to_device(void* to, const void* from, int64_t bytes) override {
    if (bytes > 0) {
      check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream_), "copy");
    }
  }
  void memset_zero(void* device, int64_t bytes) override {
    if (bytes > 0) check_cuda(cudaMemsetAsync(device, 0, bytes, stream_), "cudaMemsetAsync");
  }

  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CudaStream>(); }
  std::unique_ptr<Stream> borrow_stream(void* native) override {
    return std::make_unique<CudaStream>(static_cast<cudaStream_t>(native));
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CudaEvent>(); }
  void set_stream(Stream* stream) override {
    stream_ = stream != nullptr ? static_cast<CudaStream*>(stream)->stream : nullptr;
    check_cublas(cublasSetStream(cublas_, stream_), "cublasSetStream");
  }
  void record(Event& event) override {
    check_cuda(cudaEventRecord(static_cast<CudaEvent&>(event).event, stream_), "cudaEventRecord");
  }
  void wait(Event& event) override {
    check_cuda(cudaStreamWaitEvent(stream_, static_cast<CudaEvent&>(event).event, 0),
               "cudaStreamWaitEvent");
  }
  void synchronize(Event& event) override {
    check_cuda(cudaEventSynchronize(static_cast<CudaEvent&>(event).event), "cudaEventSynchronize");
  }
  void synchronize() override { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

  void set_matmul_precision(core::DType dtype) override {
    if (dtype != core::DType::kF32 && dtype != core::DType::kBF16 && dtype != core::DType::kF16) {
      throw std::invalid_argument("cuBLAS products: no products in " +
                                  std::string(core::dtype_name(dtype)));
    }
    matmul_precision_ = dtype;
  }
  std::string matmul_kernel() const override {
    if (matmul_precision_ == core::DType::kF32) return "cuBLAS fp32";
    return "cuBLAS " + std::string(core::dtype_name(matmul_precision_)) +
           " tensor cores (operands rounded to nearest even, fp32 accumulation)";
  }

 private:
  friend class SimtBackend<CudaBackend>;

  template <class Kernel>
  void launch_kernel(const Kernel& kernel) {
    cuda::launch(kernel, stream_);  // not SimtBackend::launch
  }
  void run_gemm(const RowMajorGemm& product, const float* A, const float* B, float* C) {
    if (matmul_precision_ == core::DType::kF32) return run_gemm_fp32(product, A, B, C);
    const std::vector<GemmTile> tiles = rounded_gemm_tiles(product, kStagingElements);
    const StagingLayout layout = staging_layout(tiles);
    uint16_t* staging = grown(staging_, staging_count_, layout.elements);
    run_staged_tiles(
        tiles, layout,
        [&](const MatrixBlock& block, bool is_a, int64_t at) {
          pack(block, is_a ? A : B, staging + at);
        },
        [&](const GemmTile& tile) {
          cublas_gemm_16(cublas_, tile.product, staging, staging + layout.b_offset,
                         C + tile.c_offset, matmul_precision_);
        });
  }
  void run_gemm_fp32(const RowMajorGemm& product, const float* A, const float* B, float* C) {
    cublas_gemm(cublas_, product, A, B, C);
  }
  void pack(const MatrixBlock& block, const float* matrix, uint16_t* to) {
    if (block.elements() == 0) return;
    launch_kernel(simt::PackRounded16{to, matrix + block.offset, block.rows, block.cols, block.ld,
                                      matmul_precision_});
  }
  double* scratch_doubles(int64_t count) { return grown(scratch_, scratch_count_, count); }
  // A scratch buffer of at least `count` Ts: grows by reallocating, and
  // cudaFree waits for the work still using the old memory, so this is
  // stream-ordered like everything else.
  template <class T>
  T* grown(T*& buffer, int64_t& buffer_count, int64_t count) {
    if (count > buffer_count) {
      deallocate(buffer);
      buffer = nullptr;
      buffer_count = 0;
      buffer = static_cast<T*>(allocate(count * static_cast<int64_t>(sizeof(T))));
      buffer_count = count;
    }
    return buffer;
  }

  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;  // the default stream until set_stream()
  cublasHandle_t cublas_ = nullptr;
  core::DType matmul_precision_ = core::DType::kF32;
  double* scratch_ = nullptr;  // partial sums, grown as needed
  int64_t scratch_count_ = 0;
  // The 16-bit products' rounded operands: 64 Mi values (128 MiB) hold
  // GPT-2's largest operands at 8 sequences of 1024 tokens in a few tiles.
  static constexpr int64_t kStagingElements = int64_t{64} << 20;
  uint16_t* staging_ = nullptr;
  int64_t staging_count_ = 0;
  AllocationTally tally_;
  // The sparse memories' pages waiting for their streams: what an
  // allocation short of room takes back.
  MemoryReclaimers reclaimers_;
  HostRanges pinned_;  // the host memory page-locked for copies
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

}  // namespace dslaunch::kernels::cuda
