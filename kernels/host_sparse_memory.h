#pragma once

#include <cstdint>
#include <memory>

#include "kernels/allocation_tally.h"
#include "kernels/sparse_memory.h"

namespace dslaunch::kernels {

// SparseMemory over the host's pages: one private anonymous mapping,
// inaccessible (PROT_NONE) except where committed, so a read of what was
// never gathered faults here as it would on a GPU; a released page's
// memory goes back to the OS (MADV_DONTNEED). Throws std::bad_alloc when
// the mapping fails.
std::unique_ptr<SparseMemory> make_host_sparse_memory(int64_t bytes, AllocationTally& tally);

}  // namespace dslaunch::kernels
