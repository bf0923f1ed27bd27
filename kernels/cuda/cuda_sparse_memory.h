#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "kernels/allocation_tally.h"
#include "kernels/memory_reclaimers.h"
#include "kernels/sparse_memory.h"

namespace dslaunch::kernels::cuda {

// SparseMemory on the current GPU through CUDA's virtual memory management:
// one reserved address range, each page (the driver's recommended
// granularity, 2 MiB on current GPUs) backed by its own physical allocation
// while committed. The driver's functions come through the runtime's entry
// point query, so nothing links against libcuda. Throws std::bad_alloc when
// the GPU has no room, std::runtime_error when the driver refuses.
//
// Releases are stream-ordered (sparse_memory.h): an event recorded on the
// stream `current_stream` returns (a cudaStream_t) marks each, and its pages
// are unmapped once a later call finds the event done, so the host does
// not wait for the GPU to give memory back (cuMemUnmap needs the pages
// unused, and does not wait for the work that uses them). Pages waiting so
// are given back to any allocation of the backend short of room: the memory
// registers with `reclaimers` (the backend's, which must outlive it), and
// its own commits short of room ask every holder there too.
std::unique_ptr<SparseMemory> make_cuda_sparse_memory(int64_t bytes, AllocationTally& tally,
                                                      std::function<void*()> current_stream,
                                                      MemoryReclaimers& reclaimers);

}  // namespace dslaunch::kernels::cuda
