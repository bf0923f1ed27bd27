#include "kernels/simt/emulated_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/allocation_tally.h"
#include "kernels/cpu/rounded_gemm.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/host_ranges.h"
#include "kernels/host_sparse_memory.h"
#include "kernels/simt/guarded_memory.h"
#include "kernels/simt/simt_backend.h"
#include "kernels/waiting_pages.h"

namespace dslaunch::kernels::simt {
namespace {

// One stream's work not yet run (StreamOrder::kDeferred): a queue that only
// grows at the back and runs from the front, with positions counted from
// the stream's first item.
struct WorkQueue {
  std::deque<std::function<void()>> waiting;
  int64_t queued = 0;  // items ever queued
  int64_t ran = 0;     // of which run (or running)
};

// A stream is its queue, shared with the handles borrow_stream() gives.
// Under kProgram nothing is queued: a stream's order is program order.
class EmulatedStream final : public Stream {
 public:
  explicit EmulatedStream(std::shared_ptr<WorkQueue> queue) : queue(std::move(queue)) {}
  std::shared_ptr<WorkQueue> queue;
};
// A point in a queue: done once `position` items of it have run.
class EmulatedEvent final : public Event {
 public:
  std::shared_ptr<WorkQueue> queue;
  int64_t position = 0;
};

// Deferred streams: sparse memory whose pages go back in stream order, as
// the CUDA backend's do: a release queues the giving back on the current
// stream, so work queued before it on that stream has run by then, and a
// stream that reads the pages unordered after it faults. The guarded
// memory underneath maps the pages and counts them.
class StreamOrderedSparseMemory final : public SparseMemory {
 public:
  using Enqueue = std::function<void(std::function<void()>)>;
  StreamOrderedSparseMemory(std::unique_ptr<SparseMemory> inner, AllocationTally& uncounted,
                            Enqueue enqueue, std::function<void()> synchronize)
      : SparseMemory(inner->data(), inner->bytes(), inner->page_bytes(), uncounted),
        inner_(std::move(inner)),
        waiting_((inner_->bytes() + inner_->page_bytes() - 1) / inner_->page_bytes()),
        enqueue_(std::move(enqueue)),
        synchronize_(std::move(synchronize)) {}
  // The queued releases refer to this object.
  ~StreamOrderedSparseMemory() override { synchronize_(); }

 private:
  void map(int64_t first, int64_t count) override {
    int64_t mapped = first;  // pages before it are committed in inner_ by this call
    try {
      for (; mapped < first + count; ++mapped) {
        if (!waiting_.waiting(mapped)) inner_->commit(begin_of(mapped), begin_of(mapped + 1));
      }
    } catch (...) {
      for (int64_t p = first; p < mapped; ++p) {
        if (!waiting_.waiting(p)) inner_->release(begin_of(p), begin_of(p + 1));
      }
      throw;
    }
    for (int64_t p = first; p < first + count; ++p) waiting_.keep(p);
  }
  void unmap(int64_t first, int64_t count) override {
    const uint64_t ticket = waiting_.wait(first, count);
    enqueue_([this, ticket, first, count] {
      waiting_.done(ticket, first, count, [this](int64_t run, int64_t pages) {
        inner_->release(begin_of(run), begin_of(run + pages));
      });
    });
  }
  int64_t begin_of(int64_t page) const { return std::min(page * page_bytes(), bytes()); }

  std::unique_ptr<SparseMemory> inner_;
  WaitingPages waiting_;
  Enqueue enqueue_;
  std::function<void()> synchronize_;
};

class EmulatedBackend final : public SimtBackend<EmulatedBackend>, public DeferredStreams {
 public:
  EmulatedBackend(const Schedule& schedule, DeviceMemory memory, StreamOrder order)
      : schedule_(schedule),
        guarded_(memory == DeviceMemory::kGuarded ? std::make_unique<GuardedMemory>() : nullptr),
        deferred_(order != StreamOrder::kProgram),
        eager_default_(order == StreamOrder::kEagerDefault) {
    if (deferred_ && !guarded_) {
      throw std::invalid_argument(
          "the emulator defers streams only over guarded memory (host code could read "
          "unguarded memory before its work has run)");
    }
    default_stream_ = new_queue();
    current_ = default_stream_;
  }
  ~EmulatedBackend() override { deallocate(scratch_); }

  std::string name() const override { return "emulated (the CUDA kernels on the CPU emulator)"; }
  bool deferred() const { return deferred_; }
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
  // As cudaFree: after every stream's work.
  void deallocate(void* data) override {
    synchronize();
    tally_.remove(data);
    if (guarded_) {
      guarded_->deallocate(data);
    } else {
      std::free(data);
    }
  }
  int64_t peak_allocated_bytes() const override { return tally_.peak(); }
  std::unique_ptr<SparseMemory> reserve_sparse(int64_t bytes) override {
    if (!guarded_) return make_host_sparse_memory(bytes, tally_);
    std::unique_ptr<SparseMemory> sparse = guarded_->reserve_sparse(bytes, tally_);
    if (!deferred_) return sparse;
    return std::make_unique<StreamOrderedSparseMemory>(
        std::move(sparse), uncounted_,
        [this](std::function<void()> work) { submit(std::move(work)); }, [this] { synchronize(); });
  }
  // As the CUDA backend: nothing to pin where the memory is the host's.
  // Pinning what the backend cannot pin (its own memory, or a range that
  // overlaps one pinned) is the caller's error, which CUDA reports too.
  bool pin_host_memory(const void* host, int64_t bytes) override {
    if (!guarded_ || bytes <= 0) return false;
    if (guarded_->holds(host, 1)) {
      throw std::invalid_argument("pin_host_memory: the range is the backend's memory");
    }
    if (pinned_.touches(host, bytes)) {
      throw std::invalid_argument("pin_host_memory: the range overlaps host memory pinned");
    }
    if (bytes > pinnable_bytes_ - pinned_.bytes()) return false;
    pinned_.add(host, bytes);
    return true;
  }
  void limit_pinned_bytes(int64_t bytes) { pinnable_bytes_ = bytes; }
  // Unpinning what is not pinned is a bug a destructor cannot throw for.
  void unpin_host_memory(const void* host) override {
    if (!pinned_.remove(host)) {
      std::fputs("emulated backend: unpin_host_memory of memory not pinned\n", stderr);
      std::abort();
    }
  }
  // The host's bytes are read now (the call's promise), written when the
  // stream gets there.
  void copy_host_to_device(void* device, const void* host, int64_t bytes) override {
    if (bytes <= 0) return;
    require_device(device, bytes, "copy_host_to_device's destination");
    count_copy(host, bytes, copies_.to_device);
    if (!deferred_) return inside([&] { std::memcpy(device, host, static_cast<size_t>(bytes)); });
    auto copy = std::make_shared<std::vector<char>>(static_cast<const char*>(host),
                                                    static_cast<const char*>(host) + bytes);
    submit([device, copy] { std::memcpy(device, copy->data(), copy->size()); });
  }
  void copy_device_to_host(void* host, const void* device, int64_t bytes) override {
    if (bytes <= 0) return;
    require_device(device, bytes, "copy_device_to_host's source");
    count_copy(host, bytes, copies_.to_host);
    run_until(*current_, current_->queued);
    inside([&] { std::memcpy(host, device, static_cast<size_t>(bytes)); });
  }
  void copy_device_to_device(void* to, const void* from, int64_t bytes) override {
    if (bytes <= 0) return;
    require_device(to, bytes, "copy_device_to_device's destination");
    require_device(from, bytes, "copy_device_to_device's source");
    submit([to, from, bytes] { std::memmove(to, from, static_cast<size_t>(bytes)); });
  }
  void memset_zero(void* device, int64_t bytes) override {
    if (bytes <= 0) return;
    require_device(device, bytes, "memset_zero's destination");
    submit([device, bytes] { std::memset(device, 0, static_cast<size_t>(bytes)); });
  }

  std::unique_ptr<Stream> create_stream() override {
    return std::make_unique<EmulatedStream>(new_queue());
  }
  std::unique_ptr<Stream> borrow_stream(void* native) override {
    return std::make_unique<EmulatedStream>(static_cast<EmulatedStream*>(native)->queue);
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<EmulatedEvent>(); }
  void set_stream(Stream* stream) override {
    current_ = stream != nullptr ? static_cast<EmulatedStream*>(stream)->queue : default_stream_;
  }
  void record(Event& event) override {
    auto& marked = static_cast<EmulatedEvent&>(event);
    marked.queue = current_;
    marked.position = current_->queued;
  }
  void wait(Event& event) override {
    const auto& marked = static_cast<const EmulatedEvent&>(event);
    if (!deferred_ || marked.queue == nullptr) return;
    submit(
        [this, queue = marked.queue, position = marked.position] { run_until(*queue, position); });
  }
  void synchronize(Event& event) override {
    const auto& marked = static_cast<const EmulatedEvent&>(event);
    if (marked.queue != nullptr) run_until(*marked.queue, marked.position);
  }
  void synchronize() override {
    for (const std::weak_ptr<WorkQueue>& stream : streams_) {
      if (const std::shared_ptr<WorkQueue> queue = stream.lock()) run_until(*queue, queue->queued);
    }
  }

  std::unique_ptr<Event> enqueue_after_default(Stream& stream,
                                               std::function<void()> host) override {
    const std::shared_ptr<WorkQueue> queue = static_cast<EmulatedStream&>(stream).queue;
    const std::shared_ptr<WorkQueue> before = std::exchange(current_, queue);
    EmulatedEvent after_default;
    after_default.queue = default_stream_;
    after_default.position = default_stream_->queued;
    wait(after_default);
    submit(std::move(host));
    auto done = std::make_unique<EmulatedEvent>();
    record(*done);
    current_ = before;
    return done;
  }
  HostCopyTally host_copies() const {
    HostCopyTally tally = copies_;
    tally.pinned_ranges = pinned_.size();
    return tally;
  }

  bool done(const Event& event) const override {
    const auto& marked = static_cast<const EmulatedEvent&>(event);
    return marked.queue == nullptr || marked.queue->ran >= marked.position;
  }

  // As the CPU backend: 16-bit products round their operands (RoundedGemm),
  // which is what cuBLAS's 32F_FAST_16BF/16F compute types do. The products
  // queued before run at the precision they were queued at.
  void set_matmul_precision(core::DType dtype) override {
    synchronize();
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
    submit([this, kernel] {
      emulate_launch(kernel.shape(), schedule_, [&kernel](EmulatedThread& t) { kernel(t); });
    });
  }
  void run_gemm(const RowMajorGemm& product, const float* A, const float* B, float* C) {
    submit([this, product, A, B, C] {
      if (rounded_) {
        rounded_->run(product, A, B, C);
      } else {
        cpu::sgemm(product, A, B, C);
      }
    });
  }
  void run_gemm_fp32(const RowMajorGemm& product, const float* A, const float* B, float* C) {
    submit([product, A, B, C] { cpu::sgemm(product, A, B, C); });
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

  std::shared_ptr<WorkQueue> new_queue() {
    auto queue = std::make_shared<WorkQueue>();
    std::erase_if(streams_, [](const std::weak_ptr<WorkQueue>& s) { return s.expired(); });
    streams_.push_back(queue);
    return queue;
  }
  // Runs `work` on the current stream: now (kProgram, and the default
  // stream under kEagerDefault), or queued.
  template <class F>
  void submit(F work) {
    if (!deferred_) return inside(work);
    current_->waiting.emplace_back(std::move(work));
    ++current_->queued;
    if (eager_default_ && current_ == default_stream_) run_until(*current_, current_->queued);
  }
  // Runs `queue` until `position` items of it have run (what a wait() item
  // runs may run other queues).
  void run_until(WorkQueue& queue, int64_t position) {
    while (queue.ran < position) {
      const std::function<void()> work = std::move(queue.waiting.front());
      queue.waiting.pop_front();
      ++queue.ran;
      inside(work);
    }
  }
  // Runs f with the device memory open to the host (guarded memory only).
  template <class F>
  void inside(const F& f) {
    if (!guarded_) return f();
    const GuardedMemory::Scope open(*guarded_);
    f();
  }
  void count_copy(const void* host, int64_t bytes, HostCopyTally::Bytes& to) {
    (pinned_.touches(host, bytes) ? to.pinned : to.pageable) += bytes;
  }
  void require_device(const void* data, int64_t bytes, const char* what) const {
    if (guarded_ && !guarded_->holds(data, bytes)) {
      throw std::invalid_argument(std::string(what) + " is not the backend's memory");
    }
  }

  Schedule schedule_;
  std::unique_ptr<GuardedMemory> guarded_;  // null: host memory
  const bool deferred_;                     // kDeferred or kEagerDefault
  const bool eager_default_;                // kEagerDefault
  std::shared_ptr<WorkQueue> default_stream_;
  std::shared_ptr<WorkQueue> current_;
  std::vector<std::weak_ptr<WorkQueue>> streams_;  // every stream made, for synchronize()
  double* scratch_ = nullptr;                      // partial sums, grown as needed
  int64_t scratch_count_ = 0;
  std::unique_ptr<cpu::RoundedGemm> rounded_;
  AllocationTally tally_;
  AllocationTally uncounted_;  // StreamOrderedSparseMemory's (tally_ counts its pages)
  HostRanges pinned_;
  int64_t pinnable_bytes_ = std::numeric_limits<int64_t>::max();  // limit_pinned_bytes()
  HostCopyTally copies_;
};

}  // namespace

std::unique_ptr<Backend> make_emulated_backend(const Schedule& schedule, DeviceMemory memory,
                                               StreamOrder order) {
  return std::make_unique<EmulatedBackend>(schedule, memory, order);
}

HostCopyTally host_copy_tally(Backend& backend) {
  auto* emulated = dynamic_cast<EmulatedBackend*>(&backend);
  return emulated != nullptr ? emulated->host_copies() : HostCopyTally{};
}

void limit_pinned_bytes(Backend& backend, int64_t bytes) {
  if (auto* emulated = dynamic_cast<EmulatedBackend*>(&backend))
    emulated->limit_pinned_bytes(bytes);
}

DeferredStreams* deferred_streams(Backend& backend) {
  auto* emulated = dynamic_cast<EmulatedBackend*>(&backend);
  return emulated != nullptr && emulated->deferred() ? emulated : nullptr;
}

}  // namespace dslaunch::kernels::simt
