#pragma once

// Device memory for the emulated backend that the host cannot touch: each
// allocation is inaccessible (PROT_NONE) except inside an open Scope, which
// the backend opens around each of its own operations.
// Host code that reads or writes a tensor between backend calls — which on
// a GPU would read a device address — gets a segmentation fault here, where
// the CPU backend (and the emulated one without guarding) would let it pass.

#include <cstdint>
#include <map>
#include <memory>
#include <set>

#include "kernels/allocation_tally.h"
#include "kernels/sparse_memory.h"

namespace dslaunch::kernels::simt {

class GuardedMemory {
 public:
  GuardedMemory();
  GuardedMemory(const GuardedMemory&) = delete;
  GuardedMemory& operator=(const GuardedMemory&) = delete;
  ~GuardedMemory();

  // `bytes` (at least 1) of page-aligned memory, zeroed; std::bad_alloc when
  // the arena has no room. Accessible at once inside an open scope.
  void* allocate(int64_t bytes);
  // Takes what allocate() returned, or nullptr.
  void deallocate(void* data);
  // `bytes` of sparse memory whose committed pages are guarded as the
  // allocations are (and the rest always inaccessible); it must not outlive
  // this object. Throws std::bad_alloc when the arena has no room.
  std::unique_ptr<SparseMemory> reserve_sparse(int64_t bytes, AllocationTally& tally);
  // Whether [data, data + bytes) lies inside one allocation, or in the
  // committed pages of one sparse reservation.
  bool holds(const void* data, int64_t bytes) const;

  // Opens every allocation for reading and writing while it lives; scopes
  // nest (the outermost closes them again).
  class Scope {
   public:
    explicit Scope(GuardedMemory& memory);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    GuardedMemory& memory_;
  };

 private:
  class Sparse;
  void set_access(bool open);
  // Page-rounded `bytes` of the arena, first fit (std::bad_alloc when none
  // are free); and their return, memory given back to the OS.
  char* take(int64_t bytes);
  void give_back(char* start, int64_t bytes);

  // Every mapping lies in one reservation of address space, handed out
  // first fit: live allocations then mostly sit side by side, and a scope
  // opens and closes them with a few mprotect calls instead of one each
  // (closing flushes the TLB of every core the process runs on).
  char* arena_ = nullptr;
  std::map<int64_t, int64_t> free_;         // arena offset -> free bytes
  std::map<const char*, int64_t> regions_;  // start -> mapped bytes
  std::set<const Sparse*> sparse_;          // live sparse reservations
  int open_depth_ = 0;
};

}  // namespace dslaunch::kernels::simt
