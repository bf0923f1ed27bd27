// Runs under mpirun (see mpi_test): every rank executes every test case, and
// every rank must start the same collectives in the same order, so a failed
// check never skips a collective (CHECK, not REQUIRE, after the groups exist).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "core/status.h"
#include "topology/process_grid.h"
#include "worker/comm/communicator.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/comm/process_groups.h"

using dslaunch::core::Status;
using dslaunch::core::StatusCode;
using dslaunch::topology::GridShape;
using dslaunch::topology::ProcessGrid;
using namespace dslaunch::worker::comm;
using namespace std::chrono_literals;

namespace {

// The world as MPI itself sees it: the truth the groups are checked against.
int world_rank() {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = -1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Waits generously: a lost collective fails the test instead of hanging it.
constexpr std::chrono::milliseconds kTestTimeout = 20s;

std::unique_ptr<ProcessGroups> make_groups(GridShape shape,
                                           std::chrono::milliseconds timeout = kTestTimeout) {
  CommOptions options;
  options.wait.timeout = timeout;
  auto created = create_mpi_process_groups(shape, options);
  INFO(created.status().message());
  REQUIRE(created.ok());
  return std::move(created.value());
}

// The whole world in one data group.
std::unique_ptr<ProcessGroups> make_world_groups(
    std::chrono::milliseconds timeout = kTestTimeout) {
  return make_groups({1, world_size(), 1}, timeout);
}

#define CHECK_OK(expression)                           \
  do {                                                 \
    const Status check_ok_status = (expression);       \
    INFO("status: " << check_ok_status.message());     \
    CHECK(check_ok_status.ok());                       \
  } while (false)

// Element i of rank r's buffer in the all_reduce test: rank-dependent, with
// signs, exactly representable in every type (64-bit values beyond 32 bits).
template <typename T>
T value_of(int r, int i) {
  const int64_t small = (i % 2 == 0 ? 1 : -1) * int64_t{(r + 1) * (i + 3)} + 5 * r - 2 * i;
  if constexpr (std::is_same_v<T, int64_t>) return small + (int64_t{1} << 40) * (r + 1);
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(small) + T(0.5) * r;
  return static_cast<T>(small);
}

template <typename T>
void check_all_reduce(Communicator& comm, ReduceOp op, int n) {
  const int size = comm.size();
  std::vector<T> buffer(n);
  for (int i = 0; i < n; ++i) buffer[i] = value_of<T>(comm.rank(), i);
  auto work = comm.all_reduce(buffer_of(buffer.data(), n), op);
  CHECK_OK(work->wait());
  CHECK(work->done());
  std::vector<T> expected(n);
  for (int i = 0; i < n; ++i) {
    T result = value_of<T>(0, i);
    for (int r = 1; r < size; ++r) {
      const T v = value_of<T>(r, i);
      if (op == ReduceOp::kSum) result += v;
      if (op == ReduceOp::kMax) result = std::max(result, v);
      if (op == ReduceOp::kMin) result = std::min(result, v);
    }
    expected[i] = result;
  }
  CHECK(buffer == expected);
}

// Every grid shape with pipe·data·model == n, in a fixed order.
std::vector<GridShape> shapes_of(int n) {
  std::vector<GridShape> shapes;
  for (int pipe = 1; pipe <= n; ++pipe) {
    for (int data = 1; pipe * data <= n; ++data) {
      if (n % (pipe * data) == 0) shapes.push_back({pipe, data, n / (pipe * data)});
    }
  }
  return shapes;
}

std::vector<int> group_containing(const std::vector<std::vector<int>>& groups, int rank) {
  for (const auto& group : groups) {
    if (std::find(group.begin(), group.end(), rank) != group.end()) return group;
  }
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("all_reduce sums, maxes and mins every numeric type exactly") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  REQUIRE(world.size() == world_size());
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    INFO("op " << static_cast<int>(op));
    check_all_reduce<float>(world, op, 7);
    check_all_reduce<double>(world, op, 7);
    check_all_reduce<int32_t>(world, op, 7);
    check_all_reduce<int64_t>(world, op, 7);
  }
}

TEST_CASE("all_reduce out of place leaves `in` alone and reduces into `out`") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int size = world.size();
  const int rank = world.rank();
  constexpr int kCount = 6;
  std::vector<double> in(kCount), out(kCount, -1.0);
  for (int i = 0; i < kCount; ++i) in[i] = value_of<double>(rank, i);
  const std::vector<double> original = in;
  CHECK_OK(world.all_reduce(buffer_of(in.data(), kCount), buffer_of(out.data(), kCount),
                            ReduceOp::kMin)
               ->wait());
  std::vector<double> expected(kCount);
  for (int i = 0; i < kCount; ++i) {
    expected[i] = value_of<double>(0, i);
    for (int r = 1; r < size; ++r) expected[i] = std::min(expected[i], value_of<double>(r, i));
  }
  CHECK(out == expected);
  CHECK(in == original);
  const CommStats stats = world.stats();
  CHECK(stats.ops[static_cast<int>(OpKind::kAllReduce)].calls == 1);
  CHECK(stats.ops[static_cast<int>(OpKind::kAllReduce)].bytes == kCount * 8);
}

TEST_CASE("reduce_scatter hands each rank the reduction of its block, zero-sized blocks too") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int size = world.size();
  const int rank = world.rank();
  // Rank 1's block is empty; the others differ in size.
  std::vector<int64_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = r == 1 ? 0 : r + 2;
  std::vector<int64_t> starts(size, 0);
  for (int r = 1; r < size; ++r) starts[r] = starts[r - 1] + counts[r - 1];
  const int64_t total = starts[size - 1] + counts[size - 1];

  SECTION("sum of int32") {
    std::vector<int32_t> in(total);
    for (int64_t j = 0; j < total; ++j) in[j] = static_cast<int32_t>(rank * 100 - j);
    // One element past this rank's block: it must stay untouched.
    std::vector<int32_t> out(counts[rank] + 1, -12345);
    auto work = world.reduce_scatter(buffer_of(in.data(), total),
                                     buffer_of(out.data(), counts[rank] + 1), counts,
                                     ReduceOp::kSum);
    CHECK_OK(work->wait());
    std::vector<int32_t> expected(counts[rank] + 1, -12345);
    for (int64_t k = 0; k < counts[rank]; ++k) {
      int32_t sum = 0;
      for (int q = 0; q < size; ++q) sum += static_cast<int32_t>(q * 100 - (starts[rank] + k));
      expected[k] = sum;
    }
    CHECK(out == expected);
  }
  SECTION("max of float") {
    std::vector<float> in(total);
    for (int64_t j = 0; j < total; ++j) in[j] = static_cast<float>((j % 2 ? rank : -rank) + j);
    std::vector<float> out(counts[rank] + 1, -1.5f);
    auto work = world.reduce_scatter(buffer_of(in.data(), total),
                                     buffer_of(out.data(), counts[rank] + 1), counts,
                                     ReduceOp::kMax);
    CHECK_OK(work->wait());
    std::vector<float> expected(counts[rank] + 1, -1.5f);
    for (int64_t k = 0; k < counts[rank]; ++k) {
      const int64_t j = starts[rank] + k;
      expected[k] = static_cast<float>((j % 2 ? size - 1 : 0) + j);
    }
    CHECK(out == expected);
  }
}

TEST_CASE("all_gather places every rank's block") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int size = world.size();
  const int rank = world.rank();
  std::vector<int64_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = r + 1;
  constexpr double kUntouched = -99.25;

  SECTION("consecutive blocks") {
    const Blocks blocks = Blocks::consecutive(counts);
    const int64_t total = blocks.displacements[size - 1] + counts[size - 1];
    std::vector<double> in(counts[rank]);
    for (int64_t k = 0; k < counts[rank]; ++k) in[k] = rank * 10.0 + k + 0.5;
    std::vector<double> out(total, kUntouched);
    auto work = world.all_gather(buffer_of(in.data(), counts[rank]), buffer_of(out.data(), total),
                                 blocks);
    CHECK_OK(work->wait());
    std::vector<double> expected;
    for (int r = 0; r < size; ++r) {
      for (int64_t k = 0; k < counts[r]; ++k) expected.push_back(r * 10.0 + k + 0.5);
    }
    CHECK(out == expected);
  }
  SECTION("explicit displacements: blocks in reverse order with gaps left untouched") {
    const int64_t stride = size + 3;  // every block is at most `size` long
    Blocks blocks;
    blocks.counts = counts;
    for (int r = 0; r < size; ++r) blocks.displacements.push_back((size - 1 - r) * stride + 1);
    const int64_t total = size * stride + 2;
    std::vector<int64_t> in(counts[rank]);
    for (int64_t k = 0; k < counts[rank]; ++k) in[k] = (int64_t{rank} << 33) + k;
    std::vector<int64_t> out(total, -7);
    auto work = world.all_gather(buffer_of(in.data(), counts[rank]), buffer_of(out.data(), total),
                                 blocks);
    CHECK_OK(work->wait());
    std::vector<int64_t> expected(total, -7);
    for (int r = 0; r < size; ++r) {
      for (int64_t k = 0; k < counts[r]; ++k) {
        expected[blocks.displacements[r] + k] = (int64_t{r} << 33) + k;
      }
    }
    CHECK(out == expected);
  }
  SECTION("in place: `in` is this rank's block of `out`") {
    const Blocks blocks = Blocks::consecutive(counts);
    const int64_t total = blocks.displacements[size - 1] + counts[size - 1];
    std::vector<float> out(total, -3.0f);
    float* mine = out.data() + blocks.displacements[rank];
    for (int64_t k = 0; k < counts[rank]; ++k) mine[k] = rank * 100.0f + k;
    auto work = world.all_gather(buffer_of(mine, counts[rank]), buffer_of(out.data(), total),
                                 blocks);
    CHECK_OK(work->wait());
    std::vector<float> expected;
    for (int r = 0; r < size; ++r) {
      for (int64_t k = 0; k < counts[r]; ++k) expected.push_back(r * 100.0f + k);
    }
    CHECK(out == expected);
  }
}

TEST_CASE("broadcast copies the root's buffer to every rank, from a non-zero root") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int size = world.size();
  for (int root : {size - 1, 1}) {
    INFO("root " << root);
    std::vector<int64_t> buffer(9, -1);
    if (world.rank() == root) {
      for (int i = 0; i < 9; ++i) buffer[i] = root * 1000 + i * i + (int64_t{1} << 35);
    }
    auto work = world.broadcast(buffer_of(buffer.data(), 9), root);
    CHECK_OK(work->wait());
    std::vector<int64_t> expected(9);
    for (int i = 0; i < 9; ++i) expected[i] = root * 1000 + i * i + (int64_t{1} << 35);
    CHECK(buffer == expected);
  }
}

TEST_CASE("all_to_all sends block r of `in` to rank r") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int size = world.size();
  const int rank = world.rank();
  constexpr int kBlock = 3;
  std::vector<int32_t> in(size * kBlock);
  for (int r = 0; r < size; ++r) {
    for (int k = 0; k < kBlock; ++k) in[r * kBlock + k] = rank * 1000 + r * 10 + k;
  }
  std::vector<int32_t> out(size * kBlock, -1);
  auto work = world.all_to_all(buffer_of(in.data(), size * kBlock),
                               buffer_of(out.data(), size * kBlock));
  CHECK_OK(work->wait());
  std::vector<int32_t> expected(size * kBlock);
  for (int q = 0; q < size; ++q) {
    for (int k = 0; k < kBlock; ++k) expected[q * kBlock + k] = q * 1000 + rank * 10 + k;
  }
  CHECK(out == expected);
}

TEST_CASE(
    "all_to_all with blocks of any size sends each rank its own block, bytes counted exactly") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int size = world.size();
  const int rank = world.rank();
  // Rank r sends rank q (r + q) % 3 elements: some blocks are empty.
  const auto count = [](int from, int to) { return int64_t{(from + to) % 3}; };
  std::vector<int64_t> sent_counts, received_counts;
  for (int q = 0; q < size; ++q) {
    sent_counts.push_back(count(rank, q));
    received_counts.push_back(count(q, rank));
  }
  const Blocks sent = Blocks::consecutive(sent_counts);
  const Blocks received = Blocks::consecutive(received_counts);
  std::vector<int32_t> in(sent.displacements.back() + sent_counts.back() + 1);
  for (int q = 0; q < size; ++q) {
    for (int64_t k = 0; k < sent_counts[q]; ++k) {
      in[sent.displacements[q] + k] = rank * 1000 + q * 10 + static_cast<int32_t>(k);
    }
  }
  std::vector<int32_t> out(received.displacements.back() + received_counts.back() + 1, -1);
  const int64_t before = groups->transport().wire_bytes("");
  CHECK_OK(world
               .all_to_all(buffer_of(in.data(), static_cast<int64_t>(in.size())), sent,
                           buffer_of(out.data(), static_cast<int64_t>(out.size())), received)
               ->wait());
  std::vector<int32_t> expected(out.size(), -1);
  for (int q = 0; q < size; ++q) {
    for (int64_t k = 0; k < received_counts[q]; ++k) {
      expected[received.displacements[q] + k] = q * 1000 + rank * 10 + static_cast<int32_t>(k);
    }
  }
  CHECK(out == expected);
  int64_t to_peers = 0;
  for (int q = 0; q < size; ++q) {
    if (q != rank) to_peers += 4 * sent_counts[q];
  }
  CHECK(groups->transport().wire_bytes("") - before == to_peers);
  // Blocks that do not fit the buffers are refused before any rank sends.
  Blocks past_end = received;
  past_end.displacements[0] = static_cast<int64_t>(out.size());
  past_end.counts[0] = 1;
  CHECK(world
            .all_to_all(buffer_of(in.data(), static_cast<int64_t>(in.size())), sent,
                        buffer_of(out.data(), static_cast<int64_t>(out.size())), past_end)
            ->wait()
            .code() == dslaunch::core::StatusCode::kInvalidArgument);
}

TEST_CASE("split makes groups of the ranks of one colour, in rank order") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int size = world.size();
  const int rank = world.rank();
  auto split = world.split("halves", rank % 2);
  REQUIRE(split.ok());
  Communicator& half = **split;
  CHECK(half.axis() == std::string(world.axis()) + "/halves");
  CHECK(half.size() == (size + 1 - rank % 2) / 2);
  CHECK(half.rank() == rank / 2);
  std::vector<int> expected;
  for (int r = rank % 2; r < size; r += 2) expected.push_back(world.world_ranks()[r]);
  CHECK(half.world_ranks() == expected);
  int64_t value = rank, sum = 0;
  CHECK_OK(half.all_reduce(buffer_of(&value, 1), buffer_of(&sum, 1), ReduceOp::kSum)->wait());
  int64_t expected_sum = 0;
  for (int r = rank % 2; r < size; r += 2) expected_sum += r;
  CHECK(sum == expected_sum);
}

TEST_CASE("send and recv pass a ring between neighbours, in order") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int size = world.size();
  const int rank = world.rank();
  const int next = (rank + 1) % size;
  const int previous = (rank + size - 1) % size;
  constexpr int kCount = 5;
  // Two messages each way: the second must not overtake the first.
  std::vector<float> first(kCount), second(kCount);
  for (int k = 0; k < kCount; ++k) {
    first[k] = rank * 10.0f + k;
    second[k] = -rank * 10.0f - k - 1;
  }
  std::vector<float> got_first(kCount, -0.5f), got_second(kCount, -0.5f);
  auto receive_first = world.recv(buffer_of(got_first.data(), kCount), previous);
  auto receive_second = world.recv(buffer_of(got_second.data(), kCount), previous);
  auto send_first = world.send(buffer_of(first.data(), kCount), next);
  auto send_second = world.send(buffer_of(second.data(), kCount), next);
  CHECK_OK(send_second->wait());
  CHECK_OK(send_first->wait());
  CHECK_OK(receive_second->wait());
  CHECK_OK(receive_first->wait());
  std::vector<float> expected_first(kCount), expected_second(kCount);
  for (int k = 0; k < kCount; ++k) {
    expected_first[k] = previous * 10.0f + k;
    expected_second[k] = -previous * 10.0f - k - 1;
  }
  CHECK(got_first == expected_first);
  CHECK(got_second == expected_second);
  CHECK(world.collectives_started() == 0);
}

TEST_CASE("barrier lets no rank out before the last one is in") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int rank = world.rank();
  const int size = world.size();
  // One host: steady_clock (CLOCK_MONOTONIC) is shared by the ranks.
  auto now_ns = [] {
    return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::now().time_since_epoch())
                                    .count());
  };
  if (rank == 0) std::this_thread::sleep_for(200ms);
  const int64_t entered = now_ns();
  auto work = world.barrier();
  CHECK_OK(work->wait());
  const int64_t left = now_ns();
  std::vector<int64_t> times = {entered, left};
  std::vector<int64_t> all(2 * size, 0);
  CHECK_OK(world.all_gather(buffer_of(times.data(), 2), buffer_of(all.data(), 2 * size),
                            Blocks::consecutive(std::vector<int64_t>(size, 2)))
               ->wait());
  const int64_t last_in = all[0];  // rank 0 slept
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r);
    CHECK(all[2 * r] <= last_in);
    CHECK(all[2 * r + 1] >= last_in);
  }
}

TEST_CASE("Operations started back to back complete correctly when waited in reverse") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int size = world.size();
  const int rank = world.rank();
  constexpr int kOps = 24;
  constexpr int kCount = 33;
  std::vector<std::vector<int64_t>> buffers(kOps, std::vector<int64_t>(kCount));
  std::vector<std::unique_ptr<Work>> works;
  for (int op = 0; op < kOps; ++op) {
    for (int i = 0; i < kCount; ++i) buffers[op][i] = (rank + 1) * (op + 1) * 1000 + i;
    if (op % 3 == 2) {
      works.push_back(world.broadcast(buffer_of(buffers[op].data(), kCount), op % size));
    } else {
      works.push_back(world.all_reduce(buffer_of(buffers[op].data(), kCount),
                                       op % 3 == 0 ? ReduceOp::kSum : ReduceOp::kMax));
    }
  }
  CHECK(world.collectives_started() == kOps);
  for (int op = kOps - 1; op >= 0; --op) CHECK_OK(works[op]->wait());
  for (int op = 0; op < kOps; ++op) {
    INFO("operation " << op);
    std::vector<int64_t> expected(kCount);
    for (int i = 0; i < kCount; ++i) {
      if (op % 3 == 0) {
        expected[i] = int64_t{size} * (size + 1) / 2 * (op + 1) * 1000 + int64_t{size} * i;
      } else if (op % 3 == 1) {
        expected[i] = int64_t{size} * (op + 1) * 1000 + i;
      } else {
        expected[i] = (op % size + 1) * (op + 1) * 1000 + i;
      }
    }
    CHECK(buffers[op] == expected);
    CHECK(works[op]->done());
  }
}

TEST_CASE("Operations on two communicators interleave") {
  const int size = world_size();
  // At 4 ranks the data groups are pairs {0, 2} and {1, 3}; at 2 the data
  // group is the world again, but on a communicator of its own.
  const GridShape shape = size >= 4 && size % 2 == 0 ? GridShape{1, size / 2, 2}
                                                     : GridShape{1, size, 1};
  auto groups = make_groups(shape);
  Communicator& world = groups->world();
  Communicator& data = groups->data();
  const int rank = world.rank();
  const std::vector<int>& data_members = data.world_ranks();
  const int64_t data_sum = std::accumulate(data_members.begin(), data_members.end(), int64_t{0});

  constexpr int kRounds = 6;
  std::vector<int64_t> world_sums(kRounds), data_sums(kRounds);
  std::vector<std::vector<int32_t>> world_gathers(kRounds, std::vector<int32_t>(size, -1));
  std::vector<int32_t> world_in(kRounds);
  std::vector<std::unique_ptr<Work>> works;
  for (int round = 0; round < kRounds; ++round) {
    world_sums[round] = rank + round;
    data_sums[round] = rank * (round + 1);
    world_in[round] = rank * 10 + round;
    works.push_back(world.all_reduce(buffer_of(&world_sums[round], 1), ReduceOp::kSum));
    works.push_back(data.all_reduce(buffer_of(&data_sums[round], 1), ReduceOp::kSum));
    works.push_back(world.all_gather(buffer_of(&world_in[round], 1),
                                     buffer_of(world_gathers[round].data(), size),
                                     Blocks::consecutive(std::vector<int64_t>(size, 1))));
  }
  // Wait for the data group's first, then the rest in reverse.
  for (size_t i = 1; i < works.size(); i += 3) CHECK_OK(works[i]->wait());
  for (size_t i = works.size(); i-- > 0;) CHECK_OK(works[i]->wait());
  for (int round = 0; round < kRounds; ++round) {
    INFO("round " << round);
    CHECK(world_sums[round] == int64_t{size} * (size - 1) / 2 + int64_t{size} * round);
    CHECK(data_sums[round] == data_sum * (round + 1));
    std::vector<int32_t> expected(size);
    for (int r = 0; r < size; ++r) expected[r] = r * 10 + round;
    CHECK(world_gathers[round] == expected);
  }
  CHECK(world.collectives_started() == 2 * kRounds);
  CHECK(data.collectives_started() == kRounds);
}

TEST_CASE("stats() counts the calls and the bytes this rank sent") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int size = world.size();
  const int rank = world.rank();
  CHECK(world.stats().calls() == 0);
  CHECK(world.stats().bytes() == 0);

  std::vector<float> f(10, 1.0f);
  CHECK_OK(world.all_reduce(buffer_of(f.data(), 10), ReduceOp::kSum)->wait());
  CHECK_OK(world.all_reduce(buffer_of(f.data(), 3), ReduceOp::kMax)->wait());

  std::vector<int64_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = r + 1;
  const int64_t total = size * (size + 1) / 2;
  std::vector<int32_t> scatter_in(total, 1), scatter_out(size, 0);
  CHECK_OK(world.reduce_scatter(buffer_of(scatter_in.data(), total),
                                buffer_of(scatter_out.data(), counts[rank]), counts,
                                ReduceOp::kSum)
               ->wait());

  std::vector<double> gather_in(counts[rank], 2.0), gather_out(total, 0.0);
  CHECK_OK(world.all_gather(buffer_of(gather_in.data(), counts[rank]),
                            buffer_of(gather_out.data(), total), Blocks::consecutive(counts))
               ->wait());

  std::vector<int64_t> bcast(6, 0);
  CHECK_OK(world.broadcast(buffer_of(bcast.data(), 6), 0)->wait());

  std::vector<float> a2a_in(2 * size, 1.0f), a2a_out(2 * size, 0.0f);
  CHECK_OK(world.all_to_all(buffer_of(a2a_in.data(), 2 * size), buffer_of(a2a_out.data(), 2 * size))
               ->wait());

  std::vector<float> message(3, 4.0f), received(3, 0.0f);
  const int next = (rank + 1) % size;
  const int previous = (rank + size - 1) % size;
  auto receive = world.recv(buffer_of(received.data(), 3), previous);
  auto send = world.send(buffer_of(message.data(), 3), next);
  CHECK_OK(send->wait());
  CHECK_OK(receive->wait());

  CHECK_OK(world.barrier()->wait());

  const CommStats stats = world.stats();
  auto op = [&stats](OpKind kind) { return stats.ops[static_cast<int>(kind)]; };
  CHECK(op(OpKind::kAllReduce).calls == 2);
  CHECK(op(OpKind::kAllReduce).bytes == 13 * 4);
  CHECK(op(OpKind::kReduceScatter).calls == 1);
  CHECK(op(OpKind::kReduceScatter).bytes == total * 4);
  CHECK(op(OpKind::kAllGather).calls == 1);
  CHECK(op(OpKind::kAllGather).bytes == counts[rank] * 8);
  CHECK(op(OpKind::kBroadcast).calls == 1);
  CHECK(op(OpKind::kBroadcast).bytes == (rank == 0 ? 6 * 8 : 0));
  CHECK(op(OpKind::kAllToAll).calls == 1);
  CHECK(op(OpKind::kAllToAll).bytes == 2 * size * 4);
  CHECK(op(OpKind::kSend).calls == 1);
  CHECK(op(OpKind::kSend).bytes == 3 * 4);
  CHECK(op(OpKind::kRecv).calls == 1);
  CHECK(op(OpKind::kRecv).bytes == 0);
  CHECK(op(OpKind::kBarrier).calls == 1);
  CHECK(op(OpKind::kBarrier).bytes == 0);
  CHECK(stats.calls() == 9);
  CHECK(stats.bytes() == 13 * 4 + total * 4 + counts[rank] * 8 + (rank == 0 ? 48 : 0) +
                             2 * size * 4 + 12);
  // Sends and receives are not collectives.
  CHECK(world.collectives_started() == 7);
  // The data communicator is another group: nothing counted there.
  CHECK(groups->data().stats().calls() == 0);
  CHECK(groups->data().collectives_started() == 0);
  CHECK(op_name(OpKind::kAllReduce) == "all_reduce");
  CHECK(op_name(OpKind::kReduceScatter) == "reduce_scatter");
}

TEST_CASE("Invalid calls fail at once with kInvalidArgument and start no collective") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int size = world.size();
  const int rank = world.rank();
  std::vector<float> f(4 * size, 1.0f), g(4 * size, 0.0f);
  std::vector<uint16_t> half(8, 0);
  const BufferRef bf16{half.data(), 8, DType::kBF16};
  std::vector<int64_t> equal(size, 2);
  std::vector<int64_t> too_many(size + 1, 1);
  Blocks short_blocks = Blocks::consecutive(std::vector<int64_t>(size - 1, 1));
  // Blocks of 4 filling an output of 4·size, the last one moved past its end.
  Blocks past_end = Blocks::consecutive(std::vector<int64_t>(size, 4));
  past_end.displacements[size - 1] = 4 * size;

  struct Case {
    const char* what;
    std::unique_ptr<Work> work;
  };
  std::vector<Case> cases;
  cases.push_back({"all_to_all count mismatch",
                   world.all_to_all(buffer_of(f.data(), 2 * size), buffer_of(g.data(), 2 * size + 1))});
  cases.push_back({"all_to_all count not a multiple of the size",
                   world.all_to_all(buffer_of(f.data(), 2 * size + 1),
                                    buffer_of(g.data(), 2 * size + 1))});
  cases.push_back({"all_gather: `in` is not this rank's block",
                   world.all_gather(buffer_of(f.data(), 3), buffer_of(g.data(), 2 * size),
                                    Blocks::consecutive(equal))});
  cases.push_back({"all_gather: a block past the end of `out`",
                   world.all_gather(buffer_of(f.data(), 4), buffer_of(g.data(), 4 * size),
                                    past_end)});
  cases.push_back({"all_gather: too few blocks",
                   world.all_gather(buffer_of(f.data(), 1), buffer_of(g.data(), size),
                                    short_blocks)});
  cases.push_back({"reduce_scatter: blocks larger than `in`",
                   world.reduce_scatter(buffer_of(f.data(), 2 * size - 1),
                                        buffer_of(g.data(), 2), equal, ReduceOp::kSum)});
  cases.push_back({"reduce_scatter: too many counts",
                   world.reduce_scatter(buffer_of(f.data(), size + 1), buffer_of(g.data(), 1),
                                        too_many, ReduceOp::kSum)});
  cases.push_back({"reduce_scatter: too few counts",
                   world.reduce_scatter(buffer_of(f.data(), size),
                                        buffer_of(g.data(), 1),
                                        std::vector<int64_t>(size - 1, 1), ReduceOp::kSum)});
  cases.push_back({"reduce_scatter of bf16",
                   world.reduce_scatter(bf16, BufferRef{half.data(), 8, DType::kBF16},
                                        std::vector<int64_t>(size, 1), ReduceOp::kSum)});
  cases.push_back({"all_reduce of bf16", world.all_reduce(bf16, ReduceOp::kSum)});
  cases.push_back({"all_reduce of fp16",
                   world.all_reduce(BufferRef{half.data(), 8, DType::kF16}, ReduceOp::kMax)});
  cases.push_back({"broadcast from root == size", world.broadcast(buffer_of(f.data(), 4), size)});
  cases.push_back({"broadcast from root -1", world.broadcast(buffer_of(f.data(), 4), -1)});
  cases.push_back({"send to peer == size", world.send(buffer_of(f.data(), 4), size)});
  cases.push_back({"send to itself", world.send(buffer_of(f.data(), 4), rank)});
  cases.push_back({"recv from peer -1", world.recv(buffer_of(g.data(), 4), -1)});
  cases.push_back({"recv from peer == size", world.recv(buffer_of(g.data(), 4), size)});
  cases.push_back({"all_reduce out of place: count mismatch",
                   world.all_reduce(buffer_of(f.data(), 4), buffer_of(g.data(), 5),
                                    ReduceOp::kSum)});
  cases.push_back({"all_reduce out of place: dtype mismatch",
                   world.all_reduce(buffer_of(f.data(), 4),
                                    BufferRef{g.data(), 4, DType::kI32}, ReduceOp::kSum)});
  cases.push_back({"all_reduce out of place of bf16",
                   world.all_reduce(bf16, BufferRef{half.data(), 8, DType::kBF16},
                                    ReduceOp::kSum)});
  cases.push_back({"all_reduce of a negative count",
                   world.all_reduce(buffer_of(f.data(), -1), ReduceOp::kSum)});

  for (Case& c : cases) {
    INFO(c.what);
    CHECK(c.work->done());
  }
  // Nothing was started or counted.
  CHECK(world.collectives_started() == 0);
  CHECK(world.stats().calls() == 0);
  CHECK(world.stats().bytes() == 0);
  CHECK(std::all_of(g.begin(), g.end(), [](float x) { return x == 0.0f; }));

  SECTION("a valid collective still works when the invalid Works were not waited on") {
    int64_t value = rank + 1;
    CHECK_OK(world.all_reduce(buffer_of(&value, 1), ReduceOp::kSum)->wait());
    CHECK(value == int64_t{size} * (size + 1) / 2);
    CHECK(world.collectives_started() == 1);
  }
  SECTION("wait() reports kInvalidArgument, and a valid collective still works afterwards") {
    for (Case& c : cases) {
      INFO(c.what);
      const Status status = c.work->wait();
      INFO("status: " << status.message());
      CHECK(status.code() == StatusCode::kInvalidArgument);
      CHECK(c.work->wait(1ms).code() == StatusCode::kInvalidArgument);
    }
    CHECK(world.collectives_started() == 0);
    int64_t value = rank + 1;
    CHECK_OK(world.all_reduce(buffer_of(&value, 1), ReduceOp::kSum)->wait());
    CHECK(value == int64_t{size} * (size + 1) / 2);
    CHECK(world.collectives_started() == 1);
  }
}

TEST_CASE("A wait past its timeout names the operation, which stays in flight") {
  // The communicators' policy: 200 ms, and on a deadline the status recorded
  // (the worker's would report a hang and end the process).
  std::vector<Status> deadlines;  // outlives the groups holding the policy
  std::vector<HangReport> reports;
  CommOptions options;
  options.wait.timeout = 200ms;
  options.wait.on_deadline = [&deadlines, &reports](const Status& status,
                                                    const HangReport& report) {
    deadlines.push_back(status);
    reports.push_back(report);
  };
  auto created = create_mpi_process_groups({1, world_size(), 1}, options);
  INFO(created.status().message());
  REQUIRE(created.ok());
  auto groups = std::move(created.value());
  Communicator& world = groups->world();
  const int size = world.size();
  const int rank = world.rank();
  CHECK(world.timeout() == 200ms);
  CHECK(world.wait_policy().timeout == 200ms);
  CHECK(groups->data().timeout() == 200ms);
  // Waits that must not pass a deadline are given a long one of their own.
  CHECK_OK(world.barrier()->wait(kTestTimeout));  // a common start

  int64_t value = rank + 1;
  if (rank == 0) {
    // The others join a second late.
    auto work = world.all_reduce(buffer_of(&value, 1), ReduceOp::kSum);
    const int64_t sequence = world.collectives_started();
    const auto before = std::chrono::steady_clock::now();
    const Status late = work->wait(300ms);
    const auto waited = std::chrono::steady_clock::now() - before;
    CHECK(late.code() == StatusCode::kDeadlineExceeded);
    const std::string& message = late.message();
    INFO("message: " << message);
    CHECK(contains(message, "all_reduce"));
    CHECK(contains(message, "world"));
    CHECK(contains(message, "#" + std::to_string(sequence)));
    CHECK(contains(message, "world all_reduce #" + std::to_string(sequence) + " of 8 B"));
    CHECK(contains(message, "did not complete within"));
    std::string ranks = "0";
    for (int r = 1; r < size; ++r) ranks += ", " + std::to_string(r);
    CHECK(contains(message, "over world ranks " + ranks));
    CHECK(waited >= 290ms);
    CHECK(waited < 900ms);
    CHECK_FALSE(work->done());
    // An explicit timeout does not call the policy's on_deadline.
    CHECK(deadlines.empty());

    // wait() with the policy: the deadline reaches on_deadline, then returns.
    const Status policy_late = work->wait();
    CHECK(policy_late.code() == StatusCode::kDeadlineExceeded);
    CHECK(contains(policy_late.message(), "did not complete within 0.2 s"));
    REQUIRE(deadlines.size() == 1);
    CHECK(deadlines[0].code() == StatusCode::kDeadlineExceeded);
    CHECK(deadlines[0].message() == policy_late.message());
    // What the controller needs to name the ranks that never started it.
    REQUIRE(reports.size() == 1);
    CHECK(reports[0].group == "world");
    CHECK(reports[0].sequence == sequence);
    CHECK(reports[0].world_ranks == world.world_ranks());
    CHECK_FALSE(work->done());

    // Without a timeout: the same operation completes once the others join.
    CHECK_OK(work->wait(0ms));
    CHECK(work->done());
    CHECK(deadlines.size() == 1);
  } else {
    std::this_thread::sleep_for(1s);
    CHECK_OK(world.all_reduce(buffer_of(&value, 1), ReduceOp::kSum)->wait(kTestTimeout));
    CHECK(deadlines.empty());
  }
  CHECK(value == int64_t{size} * (size + 1) / 2);
  // The communicator is healthy after the late waits.
  int32_t again = 2 * rank;
  CHECK_OK(world.all_reduce(buffer_of(&again, 1), ReduceOp::kMax)->wait(kTestTimeout));
  CHECK(again == 2 * (size - 1));
  CHECK(world.collectives_started() == 3);
}

TEST_CASE("Process groups match the process grid's groups for every shape of the world") {
  const int rank = world_rank();
  const int size = world_size();
  const auto shapes = shapes_of(size);
  CHECK(shapes.size() == (size == 2 ? 3u : 6u));
  std::vector<int> everyone(size);
  std::iota(everyone.begin(), everyone.end(), 0);
  for (const GridShape& shape : shapes) {
    INFO("shape pipe " << shape.pipeline << " data " << shape.data << " model " << shape.tensor);
    auto groups = make_groups(shape);
    const ProcessGrid grid(shape);
    CHECK(groups->rank() == rank);
    CHECK(groups->grid().shape() == shape);
    CHECK(groups->coord() == grid.coord_of(rank));

    struct Expected {
      Axis axis;
      int size;
      int rank;
      std::vector<int> members;
    };
    const Expected expected[] = {
        {Axis::world, size, rank, everyone},
        {Axis::pipeline, shape.pipeline, grid.coord_of(rank).pipeline,
         group_containing(grid.pipeline_groups(), rank)},
        {Axis::data, shape.data, grid.coord_of(rank).data,
         group_containing(grid.data_groups(), rank)},
        {Axis::tensor, shape.tensor, grid.coord_of(rank).tensor,
         group_containing(grid.tensor_groups(), rank)},
    };
    CHECK(&groups->communicator(Axis::world) == &groups->world());
    CHECK(&groups->communicator(Axis::pipeline) == &groups->pipeline());
    CHECK(&groups->communicator(Axis::data) == &groups->data());
    CHECK(&groups->communicator(Axis::tensor) == &groups->tensor());
    for (const Expected& e : expected) {
      INFO("axis " << axis_name(e.axis));
      Communicator& comm = groups->communicator(e.axis);
      CHECK(comm.axis() == axis_name(e.axis));
      CHECK(comm.size() == e.size);
      CHECK(comm.rank() == e.rank);
      CHECK(comm.world_ranks() == e.members);
      REQUIRE(static_cast<int>(e.members.size()) == e.size);  // same on every rank

      // The sum of the world ranks over the group is exactly its members'.
      int64_t sum = rank;
      CHECK_OK(comm.all_reduce(buffer_of(&sum, 1), ReduceOp::kSum)->wait());
      CHECK(sum == std::accumulate(e.members.begin(), e.members.end(), int64_t{0}));
      // Gathering the world ranks by group rank reads back world_ranks().
      int32_t me = rank;
      std::vector<int32_t> gathered(e.size, -1);
      CHECK_OK(comm.all_gather(buffer_of(&me, 1), buffer_of(gathered.data(), e.size),
                               Blocks::consecutive(std::vector<int64_t>(e.size, 1)))
                   ->wait());
      CHECK(std::vector<int>(gathered.begin(), gathered.end()) == e.members);
    }
  }
}

TEST_CASE("A grid that does not fit the world is refused on every rank") {
  const int size = world_size();
  for (const GridShape& shape :
       {GridShape{1, size + 1, 1}, GridShape{2, size, 1}, GridShape{1, 1, 2 * size}}) {
    INFO("shape pipe " << shape.pipeline << " data " << shape.data << " model " << shape.tensor);
    auto created = create_mpi_process_groups(shape, CommOptions{});
    REQUIRE_FALSE(created.ok());
    CHECK(created.status().code() == StatusCode::kInvalidArgument);
    INFO(created.status().message());
    CHECK(contains(created.status().message(),
                   "but the world has " + std::to_string(size)));
  }
  auto zero = create_mpi_process_groups({0, size, 1}, CommOptions{});
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.status().code() == StatusCode::kInvalidArgument);
  // The refusals left MPI usable: a valid grid still works.
  auto groups = make_world_groups();
  int32_t one = 1;
  CHECK_OK(groups->world().all_reduce(buffer_of(&one, 1), ReduceOp::kSum)->wait());
  CHECK(one == size);
}

TEST_CASE("Axis names read back, old names included") {
  CHECK(axis_name(Axis::world) == "world");
  CHECK(axis_name(Axis::pipeline) == "pipeline");
  CHECK(axis_name(Axis::data) == "data");
  CHECK(axis_name(Axis::tensor) == "tensor");
  for (Axis axis : {Axis::world, Axis::pipeline, Axis::data, Axis::tensor}) {
    CHECK(parse_axis(axis_name(axis)) == axis);
  }
  CHECK(parse_axis("pipe") == Axis::pipeline);
  CHECK(parse_axis("model") == Axis::tensor);
  CHECK(parse_axis("") == std::nullopt);
  CHECK(parse_axis("World") == std::nullopt);
  CHECK(parse_axis("pipelines") == std::nullopt);
}

TEST_CASE("The transport lists every live communicator's collectives, duplicates included") {
  auto created = create_mpi_process_groups({1, world_size(), 1}, {});
  REQUIRE(created.ok());
  auto groups = std::move(created.value());
  const auto started_on = [&](const std::string& group) -> int64_t {
    int64_t found = -1;
    for (const GroupProgress& progress : groups->transport().progress()) {
      if (progress.group == group) {
        CHECK(found == -1);  // each name once on a rank
        found = progress.started;
      }
    }
    return found;
  };
  CHECK(started_on("world") == 0);
  CHECK(started_on("data") == 0);
  CHECK(started_on("tensor") == 0);
  CHECK(started_on("pipeline") == 0);
  CHECK(groups->transport().progress().size() == 4);
  {
    auto duplicate = groups->data().duplicate("gradients");
    REQUIRE(duplicate.ok());
    int32_t one = 1;
    CHECK_OK(duplicate.value()->all_reduce(buffer_of(&one, 1), ReduceOp::kSum)->wait());
    CHECK_OK(duplicate.value()->barrier()->wait());
    CHECK(started_on("data/gradients") == 2);
    CHECK(started_on("data") == 0);  // the duplicate counts apart
    CHECK(groups->transport().progress().size() == 5);
  }
  CHECK(started_on("data/gradients") == -1);  // gone with its communicator
  CHECK(groups->transport().progress().size() == 4);
}

TEST_CASE("then() runs host work in the communicator's order, between the collectives around it") {
  auto groups = make_world_groups();
  Communicator& world = groups->world();
  const int size = world.size();
  int64_t value = world.rank() + 1;
  int64_t seen_between = -1;
  auto sum = world.all_reduce(buffer_of(&value, 1), ReduceOp::kSum);
  // Runs after the sum, and before the next collective reads `value`.
  auto host = world.then([&] {
    seen_between = value;
    value *= 10;
  });
  auto second = world.all_reduce(buffer_of(&value, 1), ReduceOp::kSum);
  CHECK_OK(second->wait());
  CHECK(host->done());
  CHECK(sum->done());
  const int64_t first_sum = int64_t{size} * (size + 1) / 2;
  CHECK(seen_between == first_sum);
  CHECK(value == first_sum * 10 * size);
  // Host work is local: not a collective, not counted.
  CHECK(world.collectives_started() == 2);
  CHECK(world.stats().calls() == 2);
}

TEST_CASE("a communicator attached to a transport counts with its groups until detached") {
  auto groups = make_world_groups();
  auto others = make_world_groups();
  Transport& transport = groups->transport();
  Communicator& outside = others->data();  // made elsewhere, as NCCL's is
  const int size = outside.size();
  std::vector<float> values(1000, 1.0f);
  const int64_t per_sum = wire_bytes(OpKind::kAllReduce, 4000, size);
  const auto data_groups = [&] {
    int count = 0;
    for (const GroupProgress& progress : transport.progress()) count += progress.group == "data";
    return count;
  };
  CHECK_OK(outside.all_reduce(buffer_of(values.data(), 1000), ReduceOp::kSum)->wait());
  const int64_t before = transport.wire_bytes("data");
  transport.attach(&outside);
  // Its bytes so far count, and so does it in the progress heartbeats carry.
  CHECK(transport.wire_bytes("data") == before + per_sum);
  CHECK(transport.wire_bytes("") >= before + per_sum);
  CHECK(data_groups() == 2);
  CHECK(transport.stats_by_axis()["data"].calls() == groups->data().stats().calls() + 1);
  CHECK_OK(outside.all_reduce(buffer_of(values.data(), 1000), ReduceOp::kSum)->wait());
  CHECK(transport.wire_bytes("data") == before + 2 * per_sum);
  // Detached, it leaves the live groups; its bytes stay counted, once.
  transport.detach(&outside);
  transport.detach(&outside);
  CHECK(data_groups() == 1);
  CHECK(transport.wire_bytes("data") == before + 2 * per_sum);
  CHECK_OK(outside.all_reduce(buffer_of(values.data(), 1000), ReduceOp::kSum)->wait());
  CHECK(transport.wire_bytes("data") == before + 2 * per_sum);
}
