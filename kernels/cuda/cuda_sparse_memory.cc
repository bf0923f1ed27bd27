#include "kernels/cuda/cuda_sparse_memory.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/waiting_pages.h"

namespace dslaunch::kernels::cuda {
namespace {

// The driver's virtual memory functions, looked up once.
struct DriverMemoryApi {
  PFN_cuMemAddressReserve_v10020 address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
};

template <typename Fn>
void look_up(const char* symbol, Fn& fn) {
  void* found = nullptr;
  cudaDriverEntryPointQueryResult result{};
  if (cudaGetDriverEntryPointByVersion(symbol, &found, 10020, cudaEnableDefault, &result) !=
          cudaSuccess ||
      result != cudaDriverEntryPointSuccess || found == nullptr) {
    throw std::runtime_error(std::string("the CUDA driver has no ") + symbol);
  }
  fn = reinterpret_cast<Fn>(found);
}

const DriverMemoryApi& driver() {
  static const DriverMemoryApi api = [] {
    DriverMemoryApi loaded;
    look_up("cuMemAddressReserve", loaded.address_reserve);
    look_up("cuMemAddressFree", loaded.address_free);
    look_up("cuMemCreate", loaded.create);
    look_up("cuMemRelease", loaded.release);
    look_up("cuMemMap", loaded.map);
    look_up("cuMemUnmap", loaded.unmap);
    look_up("cuMemSetAccess", loaded.set_access);
    look_up("cuMemGetAllocationGranularity", loaded.granularity);
    return loaded;
  }();
  return api;
}

void check_driver(CUresult result, const char* what) {
  if (result == CUDA_ERROR_OUT_OF_MEMORY) throw std::bad_alloc();
  if (result != CUDA_SUCCESS) {
    throw std::runtime_error(std::string("CUDA virtual memory: ") + what + " failed (error " +
                             std::to_string(static_cast<int>(result)) + ")");
  }
}

CUmemAllocationProp device_memory() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    throw std::runtime_error("CUDA virtual memory: no current device");
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

int64_t page_bytes(const CUmemAllocationProp& prop) {
  size_t granularity = 0;
  check_driver(driver().granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
               "cuMemGetAllocationGranularity");
  return static_cast<int64_t>(granularity);
}

int64_t rounded(int64_t bytes, int64_t page) {
  return (std::max<int64_t>(bytes, 1) + page - 1) / page * page;
}

void* reserve(int64_t bytes, int64_t page) {
  CUdeviceptr base = 0;
  check_driver(driver().address_reserve(&base, static_cast<size_t>(rounded(bytes, page)),
                                        static_cast<size_t>(page), 0, 0),
               "cuMemAddressReserve");
  return reinterpret_cast<void*>(base);
}

class CudaSparseMemory final : public SparseMemory {
 public:
  CudaSparseMemory(int64_t bytes, AllocationTally& tally, const CUmemAllocationProp& prop,
                   int64_t page, std::function<void*()> current_stream,
                   MemoryReclaimers& reclaimers)
      : SparseMemory(reserve(bytes, page), bytes, page, tally),
        prop_(prop),
        waiting_(rounded(bytes, page) / page),
        current_stream_(std::move(current_stream)),
        reclaimers_(reclaimers),
        registration_(reclaimers.add([this] { return give_back_all(); })) {}
  ~CudaSparseMemory() override {
    registration_ = {};
    cudaDeviceSynchronize();  // nothing may use the pages any more
    give_back_all();
    for_mapped_runs([this](int64_t first, int64_t count) { unmap_now(first, count); });
    for (cudaEvent_t event : idle_events_) cudaEventDestroy(event);
    driver().address_free(address(0), static_cast<size_t>(rounded(bytes(), page_bytes())));
  }

 private:
  // A release waiting for its stream's work.
  struct Release {
    cudaEvent_t done;
    uint64_t ticket;
    int64_t first;
    int64_t count;
  };

  CUdeviceptr address(int64_t page) const {
    return reinterpret_cast<CUdeviceptr>(data()) + static_cast<CUdeviceptr>(page * page_bytes());
  }
  // Pages still waiting to go back keep their memory. Short of room, wait
  // for every waiting release, this memory's and the backend's other
  // holders', and try once more.
  void map(int64_t first, int64_t count) override {
    give_back_done();
    try {
      map_free_pages(first, count);
    } catch (const std::bad_alloc&) {
      if (reclaimers_.reclaim_all() == 0) throw;
      map_free_pages(first, count);
    }
    for (int64_t p = first; p < first + count; ++p) waiting_.keep(p);
  }
  // Maps the pages of [first, first + count) not waiting to go back, all
  // or none: each page its own allocation, so that any page can go on its
  // own.
  void map_free_pages(int64_t first, int64_t count) {
    const auto page = static_cast<size_t>(page_bytes());
    std::vector<int64_t> mapped;
    try {
      for (int64_t p = first; p < first + count; ++p) {
        if (waiting_.waiting(p)) continue;
        CUmemGenericAllocationHandle handle{};
        check_driver(driver().create(&handle, page, &prop_, 0), "cuMemCreate");
        const CUresult result = driver().map(address(p), page, 0, handle, 0);
        driver().release(handle);  // the mapping keeps the memory
        check_driver(result, "cuMemMap");
        mapped.push_back(p);
        CUmemAccessDesc access{};
        access.location = prop_.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        check_driver(driver().set_access(address(p), page, &access, 1), "cuMemSetAccess");
      }
    } catch (...) {
      for (int64_t p : mapped) unmap_now(p, 1);
      throw;
    }
  }
  void unmap(int64_t first, int64_t count) override {
    const uint64_t ticket = waiting_.wait(first, count);
    cudaEvent_t done = nullptr;
    if (!idle_events_.empty()) {
      done = idle_events_.back();
      idle_events_.pop_back();
    } else if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess) {
      done = nullptr;
    }
    if (done == nullptr ||
        cudaEventRecord(done, static_cast<cudaStream_t>(current_stream_())) != cudaSuccess) {
      // No event (a context already broken): give the pages back in program order.
      if (done != nullptr) idle_events_.push_back(done);
      cudaDeviceSynchronize();
      waiting_.done(ticket, first, count, [this](int64_t run, int64_t n) { unmap_now(run, n); });
      return;
    }
    releases_.push_back({done, ticket, first, count});
    give_back_done();
  }
  // Gives back the pages of the releases whose streams have got there
  // (polled: cudaEventQuery does not wait).
  void give_back_done() {
    std::erase_if(releases_, [this](const Release& release) {
      if (cudaEventQuery(release.done) != cudaSuccess) return false;
      finish(release);
      return true;
    });
  }
  // Waits for every waiting release and gives its pages back; their bytes.
  int64_t give_back_all() {
    int64_t pages = 0;
    for (const Release& release : releases_) {
      cudaEventSynchronize(release.done);
      pages += finish(release);
    }
    releases_.clear();
    return pages * page_bytes();
  }
  // The pages given back.
  int64_t finish(const Release& release) {
    int64_t pages = 0;
    waiting_.done(release.ticket, release.first, release.count,
                  [this, &pages](int64_t run, int64_t n) {
                    unmap_now(run, n);
                    pages += n;
                  });
    idle_events_.push_back(release.done);
    return pages;
  }
  // Unmapping pages this object mapped fails only in a context already
  // broken by a fault, which is sticky: the next kernel or copy reports it,
  // so the results here (also in the destructor and the rollback above,
  // which must not throw) are not checked.
  void unmap_now(int64_t first, int64_t count) {
    for (int64_t p = first; p < first + count; ++p) {
      driver().unmap(address(p), static_cast<size_t>(page_bytes()));
    }
  }

  CUmemAllocationProp prop_;
  WaitingPages waiting_;
  std::function<void*()> current_stream_;
  std::vector<Release> releases_;         // in the order they were made
  std::vector<cudaEvent_t> idle_events_;  // for the next releases
  MemoryReclaimers& reclaimers_;
  MemoryReclaimers::Registration registration_;  // last: first to go
};

}  // namespace

std::unique_ptr<SparseMemory> make_cuda_sparse_memory(int64_t bytes, AllocationTally& tally,
                                                      std::function<void*()> current_stream,
                                                      MemoryReclaimers& reclaimers) {
  const CUmemAllocationProp prop = device_memory();
  return std::make_unique<CudaSparseMemory>(bytes, tally, prop, page_bytes(prop),
                                            std::move(current_stream), reclaimers);
}

}  // namespace dslaunch::kernels::cuda
