#include "worker/comm/mpi_stream.h"

#include <algorithm>
#include <utility>

#if defined(__SSE2__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

#include "worker/comm/mpi_status.h"

namespace dslaunch::worker::comm {
namespace {

// MPI_SUM on floats runs on this thread; like the compute threads it flushes
// denormals, which are both slow and flushed everywhere else.
void flush_denormals_on_this_thread() {
#if defined(__SSE2__)
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#endif
}

// How long a stream looks for its next operation, and a waiter for its
// operation's end, yielding the core, before sleeping on a condition.
constexpr std::chrono::microseconds kLinger{200};
// The longest sleep between tests of sends and receives in flight.
constexpr std::chrono::microseconds kMaxPollInterval{1000};

}  // namespace

void MpiTransport::stall_point() const {
  while (stall_.load()) std::this_thread::sleep_for(std::chrono::hours(1));
}

std::vector<GroupProgress> MpiTransport::progress() const {
  std::lock_guard lock(mutex_);
  std::vector<GroupProgress> all;
  for (const Communicator* communicator : communicators_) {
    all.push_back({std::string(communicator->axis()), communicator->collectives_started()});
  }
  return all;
}

std::map<std::string, CommStats> MpiTransport::stats_by_axis() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, CommStats> all;
  for (const Communicator* communicator : communicators_) {
    const CommStats stats = communicator->stats();
    CommStats& sum = all[std::string(communicator->axis())];
    for (int kind = 0; kind < kOpKindCount; ++kind) {
      sum.ops[kind].calls += stats.ops[kind].calls;
      sum.ops[kind].bytes += stats.ops[kind].bytes;
      sum.ops[kind].wire_bytes += stats.ops[kind].wire_bytes;
      sum.ops[kind].seconds += stats.ops[kind].seconds;
    }
  }
  return all;
}

namespace {

// Whether a communicator of axis `name` counts in `axis`'s bytes: the axis
// itself and those made from it ("data/gradients" in "data"); "" all.
bool within(std::string_view name, std::string_view axis) {
  return axis.empty() || name == axis ||
         (name.size() > axis.size() && name.compare(0, axis.size(), axis) == 0 &&
          name[axis.size()] == '/');
}

}  // namespace

// Locks mutex_ before wire_mutex_, as detach() does.
int64_t MpiTransport::wire_bytes(std::string_view axis) const {
  int64_t total = 0;
  std::lock_guard lock(mutex_);
  for (const Communicator* communicator : attached_) {
    if (within(communicator->axis(), axis)) total += wire_bytes_of(*communicator);
  }
  std::lock_guard wire_lock(wire_mutex_);
  for (const auto& [name, bytes] : wire_bytes_) {
    if (within(name, axis)) total += bytes;
  }
  return total;
}

int64_t MpiTransport::wire_bytes_of(const Communicator& communicator) {
  const CommStats stats = communicator.stats();
  int64_t total = 0;
  for (const CommStats::Op& op : stats.ops) total += op.wire_bytes;
  return total;
}

void MpiTransport::attach(const Communicator* communicator) {
  std::lock_guard lock(mutex_);
  communicators_.push_back(communicator);
  attached_.push_back(communicator);
}

// Its bytes move to the counts of communicators gone, under both locks so
// that wire_bytes() never sees them twice or not at all.
void MpiTransport::detach(const Communicator* communicator) {
  std::lock_guard lock(mutex_);
  if (std::erase(attached_, communicator) == 0) return;
  std::erase(communicators_, communicator);
  std::lock_guard wire_lock(wire_mutex_);
  const std::string axis(communicator->axis());
  wire_bytes_[axis] += wire_bytes_of(*communicator);
}

void MpiTransport::count_wire_bytes(std::string_view axis, int64_t bytes) {
  std::lock_guard lock(wire_mutex_);
  const auto found = wire_bytes_.find(axis);
  if (found != wire_bytes_.end()) {
    found->second += bytes;
  } else {
    wire_bytes_.emplace(std::string(axis), bytes);
  }
}

void MpiTransport::add(const Communicator* communicator) {
  std::lock_guard lock(mutex_);
  communicators_.push_back(communicator);
}

void MpiTransport::remove(const Communicator* communicator) {
  std::lock_guard lock(mutex_);
  std::erase(communicators_, communicator);
}

MpiStream::MpiStream(const MpiTransport& transport, std::chrono::microseconds poll_interval)
    : transport_(transport), poll_interval_(poll_interval), idle_poll_(poll_interval) {
  thread_ = std::thread([this] { loop(); });
}

MpiStream::~MpiStream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queued_or_stopping_.notify_one();
  thread_.join();
}

void MpiStream::submit(Start start, std::shared_ptr<MpiOpState> state) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(start), nullptr, std::move(state)});
  }
  queued_or_stopping_.notify_one();
}

void MpiStream::submit_blocking(Blocking call, std::shared_ptr<MpiOpState> state) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({nullptr, std::move(call), std::move(state)});
  }
  queued_or_stopping_.notify_one();
}

int MpiStream::call(Blocking blocking) {
  auto state = std::make_shared<MpiOpState>();
  int code = MPI_SUCCESS;
  submit_blocking(
      [&code, &blocking] {
        code = blocking();
        return code;
      },
      state);
  wait(*state, std::chrono::milliseconds(0));
  return code;
}

bool MpiStream::wait(const MpiOpState& state, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  // The same for the waiter: a short collective completes within the linger.
  const auto until = std::chrono::steady_clock::now() + kLinger;
  while (!state.done && std::chrono::steady_clock::now() < until) {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
  if (timeout.count() <= 0) {
    completed_.wait(lock, [&state] { return state.done; });
    return true;
  }
  return completed_.wait_for(lock, timeout, [&state] { return state.done; });
}

bool MpiStream::done(const MpiOpState& state) const {
  std::lock_guard lock(mutex_);
  return state.done;
}

void MpiStream::complete(const std::shared_ptr<MpiOpState>& state, core::Status status) {
  {
    std::lock_guard lock(mutex_);
    state->status = std::move(status);
    state->done = true;
  }
  completed_.notify_all();
}

void MpiStream::loop() {
  flush_denormals_on_this_thread();
  for (;;) {
    Pending next;
    {
      std::unique_lock lock(mutex_);
      if (in_flight_.empty()) {
        // Collectives often come back to back (a step's buckets, a gather
        // then a sum): look for the next one, yielding the core, a little
        // while before sleeping, so it does not wait for a wake-up that on
        // a busy or oversubscribed machine takes a scheduler tick.
        const auto until = std::chrono::steady_clock::now() + kLinger;
        while (queue_.empty() && !stopping_ && std::chrono::steady_clock::now() < until) {
          lock.unlock();
          std::this_thread::yield();
          lock.lock();
        }
        queued_or_stopping_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      } else if (queue_.empty() && !stopping_) {
        // Sends or receives in flight, none completed at the last test:
        // sleep unless an operation is queued, longer each time.
        queued_or_stopping_.wait_for(lock, idle_poll_,
                                     [this] { return stopping_ || !queue_.empty(); });
        idle_poll_ = std::min(idle_poll_ * 2, kMaxPollInterval);
      }
      if (stopping_) return;
      if (!queue_.empty()) {
        next = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (next.state) {
      run(next);
      idle_poll_ = poll_interval_;
    }
    if (!in_flight_.empty() && test_in_flight()) idle_poll_ = poll_interval_;
  }
}

void MpiStream::run(Pending& pending) {
  if (pending.blocking) {
    const int code = pending.blocking();
    complete(pending.state, from_mpi(code, "the operation"));
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  if (const int code = pending.start(&request); code != MPI_SUCCESS) {
    complete(pending.state, from_mpi(code, "starting the operation"));
    return;
  }
  in_flight_.push_back(std::move(pending));
  requests_.push_back(request);
}

bool MpiStream::test_in_flight() {
  std::vector<int> indices(requests_.size());
  std::vector<MPI_Status> statuses(requests_.size());
  int completed = 0;
  const int code = MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &completed,
                                indices.data(), statuses.data());
  if (code != MPI_SUCCESS && code != MPI_ERR_IN_STATUS) {
    // The requests' states are unknown: every operation in flight fails.
    for (Pending& pending : in_flight_) complete(pending.state, from_mpi(code, "MPI_Testsome"));
    in_flight_.clear();
    requests_.clear();
    return true;
  }
  if (completed == MPI_UNDEFINED || completed == 0) return false;
  for (int i = 0; i < completed; ++i) {
    const int index = indices[i];
    const int status_code = code == MPI_ERR_IN_STATUS ? statuses[i].MPI_ERROR : MPI_SUCCESS;
    complete(in_flight_[index].state, from_mpi(status_code, "the operation"));
    in_flight_[index].state.reset();
  }
  // Completed requests are MPI_REQUEST_NULL now: drop them, keeping order.
  size_t kept = 0;
  for (size_t k = 0; k < in_flight_.size(); ++k) {
    if (!in_flight_[k].state) continue;
    if (kept != k) {
      in_flight_[kept] = std::move(in_flight_[k]);
      requests_[kept] = requests_[k];
    }
    ++kept;
  }
  in_flight_.resize(kept);
  requests_.resize(kept);
  return true;
}

}  // namespace dslaunch::worker::comm
