#include "kernels/simt/emulator.h"

#include <algorithm>
#include <array>
#include <exception>
#include <numeric>
#include <utility>

#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>

namespace dslaunch::kernels::simt {

namespace ctx = boost::context;

namespace {

constexpr int kMaxBlockSize = 1024;
constexpr int64_t kMaxSharedBytes = 48 * 1024;  // without cudaFuncSetAttribute's opt-in
constexpr size_t kSharedAlignment = 16;
constexpr size_t kGuardBytes = 256;  // a multiple of kSharedAlignment
constexpr std::byte kUnwrittenByte{0xFF};
constexpr std::byte kGuardByte{0xA5};
// Kernel bodies are small; a guard page below the stack turns an overflow
// into a crash rather than silent corruption.
constexpr size_t kFiberStackBytes = 128 * 1024;

void validate(const LaunchShape& shape) {
  if (shape.grid < 1) {
    throw std::invalid_argument("grid size " + std::to_string(shape.grid) +
                                " is below CUDA's minimum of 1 block");
  }
  if (shape.block < 1 || shape.block > kMaxBlockSize) {
    throw std::invalid_argument("block size " + std::to_string(shape.block) +
                                " is outside CUDA's range of 1 to " +
                                std::to_string(kMaxBlockSize) + " threads");
  }
  if (shape.shared_bytes < 0 || shape.shared_bytes > kMaxSharedBytes) {
    throw std::invalid_argument("shared_bytes " + std::to_string(shape.shared_bytes) +
                                " is outside CUDA's range of 0 to " +
                                std::to_string(kMaxSharedBytes) +
                                " bytes of dynamic shared memory (48 KiB, without opt-in)");
  }
}

// Puts items (blocks, or a phase's threads, in ascending order) in the
// schedule's order. Shuffles with splitmix64 and Fisher-Yates rather than
// std::shuffle, whose draws differ between standard libraries.
class ScheduleOrder {
 public:
  explicit ScheduleOrder(const Schedule& schedule)
      : order_(schedule.order), state_(schedule.seed) {}

  void arrange(std::vector<int>& items) {
    switch (order_) {
      case Schedule::Order::kForward:
        return;
      case Schedule::Order::kReverse:
        std::reverse(items.begin(), items.end());
        return;
      case Schedule::Order::kShuffled:
        for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[next() % i]);
        return;
    }
  }

 private:
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  Schedule::Order order_;
  uint64_t state_;
};

// A block's dynamic shared memory between two guard areas:
// [kGuardBytes guard][bytes][kGuardBytes guard], the start 16-byte aligned.
class SharedMemory {
 public:
  explicit SharedMemory(int64_t bytes)
      : bytes_(static_cast<size_t>(bytes)),
        chunks_((kGuardBytes + bytes_ + kGuardBytes + kSharedAlignment - 1) / kSharedAlignment) {}

  std::byte* data() { return all() + kGuardBytes; }

  void fill() {
    std::fill(all(), data(), kGuardByte);
    std::fill(data(), data() + bytes_, kUnwrittenByte);
    std::fill(data() + bytes_, data() + bytes_ + kGuardBytes, kGuardByte);
  }

  void check_guards(int block_index) {
    const auto is_changed = [](std::byte b) { return b != kGuardByte; };
    const std::byte* after = data() + bytes_;
    if (const std::byte* p = std::find_if(after, after + kGuardBytes, is_changed);
        p != after + kGuardBytes) {
      throw KernelFault("the kernel wrote past the end of its " + std::to_string(bytes_) +
                        " bytes of shared memory, at byte offset " + std::to_string(p - data()) +
                        " (block " + std::to_string(block_index) + ")");
    }
    if (std::any_of(all(), data(), is_changed)) {
      throw KernelFault("the kernel wrote before the start of its " + std::to_string(bytes_) +
                        " bytes of shared memory (block " + std::to_string(block_index) + ")");
    }
  }

 private:
  struct alignas(kSharedAlignment) Chunk {
    std::byte bytes[kSharedAlignment];
  };

  std::byte* all() { return chunks_.front().bytes; }

  size_t bytes_;
  std::vector<Chunk> chunks_;
};

// Fiber stacks, kept from block to block and launch to launch on the thread
// that runs them: mapping a fresh guarded stack for every thread costs more
// than running most kernel bodies, and unmapping one flushes the TLB of
// every core the process runs on, which is dear on virtual machines.
class StackPool {
 public:
  StackPool() = default;
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;
  ~StackPool() {
    for (ctx::stack_context& stack : free_) mapper_.deallocate(stack);
  }

  // Boost.Context's StackAllocator, lending this pool's stacks.
  class Lender {
   public:
    explicit Lender(StackPool& pool) : pool_(&pool) {}
    ctx::stack_context allocate() { return pool_->take(); }
    void deallocate(ctx::stack_context& stack) noexcept { pool_->free_.push_back(stack); }

   private:
    StackPool* pool_;
  };

 private:
  ctx::stack_context take() {
    if (free_.empty()) {
      // Room for every stack there is, so that deallocate never allocates.
      free_.reserve(++mapped_);
      return mapper_.allocate();
    }
    const ctx::stack_context stack = free_.back();
    free_.pop_back();
    return stack;
  }

  ctx::protected_fixedsize_stack mapper_{kFiberStackBytes};
  size_t mapped_ = 0;
  std::vector<ctx::stack_context> free_;
};

}  // namespace

namespace detail {

// One block's run: its threads as fibers, resumed one at a time by the
// calling (scheduler) context in phases. A phase resumes every ready thread
// once, in the schedule's order, until it returns or waits at a barrier;
// between phases, barriers that all their threads have reached let them go.
class BlockRun {
 public:
  BlockRun(const LaunchShape& shape, int block_index, std::byte* shared_memory,
           ScheduleOrder& order, StackPool& stacks,
           const std::function<void(EmulatedThread&)>& body)
      : block_index_(block_index),
        order_(order),
        stacks_(stacks),
        body_(body),
        exchange_((shape.block + EmulatedThread::kWarpSize - 1) / EmulatedThread::kWarpSize),
        slots_(shape.block) {
    threads_.reserve(shape.block);
    for (int t = 0; t < shape.block; ++t) {
      threads_.push_back(
          EmulatedThread(this, t, block_index, shape.block, shape.grid, shared_memory));
    }
  }

  // Runs the block to the end. Throws what a thread threw or a KernelFault;
  // the threads still suspended are then unwound by ~BlockRun.
  void run() {
    for (int t = 0; t < size(); ++t) {
      slots_[t].fiber = ctx::fiber(
          std::allocator_arg, StackPool::Lender(stacks_),
          [this, t](ctx::fiber&& scheduler) { return run_thread(t, std::move(scheduler)); });
    }
    std::vector<int> ready;
    do {
      ready.clear();
      for (int t = 0; t < size(); ++t) {
        if (slots_[t].state == State::kReady) ready.push_back(t);
      }
      order_.arrange(ready);
      for (int t : ready) {
        slots_[t].fiber = std::move(slots_[t].fiber).resume();
        if (error_) std::rethrow_exception(error_);
      }
    } while (release_barriers());
  }

  void sync_threads(int t) { wait_at(t, State::kAtSyncThreads); }

  double shfl_xor(int t, double value, int lane_mask) {
    const int warp = t / EmulatedThread::kWarpSize;
    const int lane = t % EmulatedThread::kWarpSize;
    if (lane_mask < 0 || lane_mask >= EmulatedThread::kWarpSize) {
      throw KernelFault("shfl_xor with lane mask " + std::to_string(lane_mask) +
                        ", outside [0, 32) (thread " + std::to_string(t) + " of block " +
                        std::to_string(block_index_) + ")");
    }
    if (const int lanes = warp_end(warp) - warp * EmulatedThread::kWarpSize;
        lanes < EmulatedThread::kWarpSize) {
      throw KernelFault("shfl_xor in warp " + std::to_string(warp) + ", which has " +
                        std::to_string(lanes) + " of 32 lanes as the block size " +
                        std::to_string(size()) +
                        " is not a multiple of 32: a full-mask shuffle there is undefined "
                        "(thread " +
                        std::to_string(t) + " of block " + std::to_string(block_index_) + ")");
    }
    // Two exchange areas used in turn: a lane may be writing its next
    // shuffle's value before a warp-mate has read this one's, but it cannot
    // get two shuffles ahead, since the next one waits for every lane.
    std::array<double, EmulatedThread::kWarpSize>& area =
        exchange_[warp][slots_[t].shuffles_done % 2];
    area[lane] = value;
    wait_at(t, State::kAtShuffle);
    ++slots_[t].shuffles_done;
    return area[lane ^ lane_mask];
  }

 private:
  enum class State { kReady, kAtSyncThreads, kAtShuffle, kReturned };

  struct ThreadSlot {
    State state = State::kReady;
    int shuffles_done = 0;
    // The scheduler context, held while this thread runs, to suspend to.
    ctx::fiber scheduler;
    // This thread, while suspended; empty once it returned. Destroying a
    // suspended fiber unwinds its stack.
    ctx::fiber fiber;
  };

  int size() const { return static_cast<int>(slots_.size()); }

  int warps() const { return static_cast<int>(exchange_.size()); }

  int warp_end(int warp) const { return std::min(size(), (warp + 1) * EmulatedThread::kWarpSize); }

  ctx::fiber run_thread(int t, ctx::fiber&& scheduler) {
    ThreadSlot& slot = slots_[t];
    slot.scheduler = std::move(scheduler);
    try {
      body_(threads_[t]);
    } catch (const ctx::detail::forced_unwind&) {
      throw;  // ~BlockRun is unwinding this suspended thread; let it finish
    } catch (...) {
      error_ = std::current_exception();
    }
    slot.state = State::kReturned;
    return std::move(slot.scheduler);
  }

  void wait_at(int t, State barrier) {
    ThreadSlot& slot = slots_[t];
    slot.state = barrier;
    slot.scheduler = std::move(slot.scheduler).resume();
  }

  // Makes ready the threads of every barrier that all its threads have
  // reached. Returns false once every thread has returned; throws KernelFault
  // when the threads still waiting can never go on.
  bool release_barriers() {
    bool released = false;
    for (int w = 0; w < warps(); ++w) {
      const auto first = slots_.begin() + w * EmulatedThread::kWarpSize;
      const auto last = slots_.begin() + warp_end(w);
      if (std::all_of(first, last,
                      [](const ThreadSlot& s) { return s.state == State::kAtShuffle; })) {
        for (auto s = first; s != last; ++s) s->state = State::kReady;
        released = true;
      }
    }
    if (released) return true;
    if (all_in(State::kAtSyncThreads)) {
      for (ThreadSlot& s : slots_) s.state = State::kReady;
      return true;
    }
    if (all_in(State::kReturned)) return false;
    throw KernelFault(describe_stuck_threads());
  }

  bool all_in(State state) const {
    return std::all_of(slots_.begin(), slots_.end(),
                       [state](const ThreadSlot& s) { return s.state == state; });
  }

  int first_in(State state, int begin, int end) const {
    for (int t = begin; t < end; ++t) {
      if (slots_[t].state == state) return t;
    }
    return -1;
  }

  std::string describe_stuck_threads() const {
    const std::string block = " of block " + std::to_string(block_index_);
    if (const int shuffler = first_in(State::kAtShuffle, 0, size()); shuffler >= 0) {
      // Its warp was not let go, so a warp-mate has returned or waits at
      // sync_threads.
      const int warp = shuffler / EmulatedThread::kWarpSize;
      const int begin = warp * EmulatedThread::kWarpSize;
      if (const int returned = first_in(State::kReturned, begin, warp_end(warp)); returned >= 0) {
        return "thread " + std::to_string(returned) + block + " returned while thread " +
               std::to_string(shuffler) + " of its warp waits at shfl_xor: every lane of the " +
               "warp must reach a full-mask shuffle";
      }
      return "thread " + std::to_string(shuffler) + block + " waits at shfl_xor while thread " +
             std::to_string(first_in(State::kAtSyncThreads, begin, warp_end(warp))) +
             " of its warp waits at sync_threads: the lanes of a warp are at different barriers";
    }
    return "thread " + std::to_string(first_in(State::kReturned, 0, size())) + block +
           " returned while thread " + std::to_string(first_in(State::kAtSyncThreads, 0, size())) +
           " waits at sync_threads: a __syncthreads that not every thread of the block reaches "
           "is undefined behaviour in CUDA";
  }

  const int block_index_;
  ScheduleOrder& order_;
  StackPool& stacks_;
  const std::function<void(EmulatedThread&)>& body_;
  std::vector<EmulatedThread> threads_;
  // Per warp, the two areas in which its lanes exchange shuffled values.
  std::vector<std::array<std::array<double, EmulatedThread::kWarpSize>, 2>> exchange_;
  std::exception_ptr error_;  // the first exception a thread threw
  // Last, so that it is destroyed first: unwinding a suspended thread may
  // still touch the members above.
  std::vector<ThreadSlot> slots_;
};

void run_launch(const LaunchShape& shape, const Schedule& schedule,
                const std::function<void(EmulatedThread&)>& body) {
  validate(shape);
  ScheduleOrder order(schedule);
  std::vector<int> blocks(shape.grid);
  std::iota(blocks.begin(), blocks.end(), 0);
  order.arrange(blocks);
  SharedMemory shared_memory(shape.shared_bytes);
  thread_local StackPool stacks;
  for (int b : blocks) {
    shared_memory.fill();
    BlockRun(shape, b, shared_memory.data(), order, stacks, body).run();
    shared_memory.check_guards(b);
  }
}

}  // namespace detail

void EmulatedThread::sync_threads() { block_run_->sync_threads(thread_index_); }

float EmulatedThread::shfl_xor(float value, int lane_mask) {
  return static_cast<float>(block_run_->shfl_xor(thread_index_, value, lane_mask));
}

double EmulatedThread::shfl_xor(double value, int lane_mask) {
  return block_run_->shfl_xor(thread_index_, value, lane_mask);
}

std::string describe(const Schedule& schedule) {
  switch (schedule.order) {
    case Schedule::Order::kForward:
      return "forward";
    case Schedule::Order::kReverse:
      return "reverse";
    case Schedule::Order::kShuffled:
      return "shuffled (seed " + std::to_string(schedule.seed) + ")";
  }
  return "unknown order";
}

std::vector<Schedule> standard_schedules() {
  std::vector<Schedule> schedules = {{Schedule::Order::kForward}, {Schedule::Order::kReverse}};
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    schedules.push_back({Schedule::Order::kShuffled, seed});
  }
  return schedules;
}

}  // namespace dslaunch::kernels::simt
