// Runs under mpirun (see mpi_test): every rank executes every test case.
#include "worker/commbench/commbench.h"

#include <mpi.h>

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "worker/commbench/bandwidth.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/commbench/check.h"

using dslaunch::topology::GridShape;
using dslaunch::worker::comm::Axis;
using dslaunch::worker::comm::ProcessGroups;
using namespace dslaunch::worker::commbench;

namespace {

int world_size() {
  int size = -1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

std::unique_ptr<ProcessGroups> make_groups(GridShape shape) {
  auto created = dslaunch::worker::comm::create_mpi_process_groups(shape, {});
  REQUIRE(created.ok());
  return std::move(created.value());
}

CommbenchOptions small_options() {
  CommbenchOptions options;
  options.min_bytes = 64;
  options.max_bytes = 1024;
  options.iterations = 3;
  options.warmup = 1;
  return options;
}

struct Expected {
  std::string group;
  std::string collective;
  int64_t bytes;
  int ranks;
};

void check_results(const std::vector<CommbenchResult>& results,
                   const std::vector<Expected>& expected) {
  REQUIRE(results.size() == expected.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const CommbenchResult& r = results[i];
    INFO("result " << i << ": " << format_result(r));
    CHECK(r.group == expected[i].group);
    CHECK(r.collective == expected[i].collective);
    CHECK(r.bytes == expected[i].bytes);
    CHECK(r.ranks == expected[i].ranks);
    CHECK(r.correct);
    CHECK(r.time_us > 0);
    const auto collective = *parse_collective(r.collective);
    const auto bw = bandwidth(collective, r.bytes, r.ranks, r.time_us / 1e6);
    CHECK(r.algbw_gbs == Approx(bw.algbw_gbs).epsilon(1e-12));
    CHECK(r.busbw_gbs == Approx(bw.busbw_gbs).epsilon(1e-12));
  }
}

// Every rank must hold the same results: compare with rank 0's.
void check_same_on_every_rank(const std::vector<CommbenchResult>& results) {
  std::vector<double> times;
  for (const auto& r : results) times.push_back(r.time_us);
  std::vector<double> root = times;
  REQUIRE(MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD) ==
          MPI_SUCCESS);
  CHECK(times == root);
}

}  // namespace

TEST_CASE("Every collective on the world is correct at every size") {
  const int n = world_size();
  const auto groups = make_groups({1, n, 1});
  std::vector<CommbenchResult> reported;
  std::string error = "stale";
  const auto results = run_commbench(
      *groups, small_options(), [&](const CommbenchResult& r) { reported.push_back(r); }, error);
  REQUIRE(error.empty());

  std::vector<Expected> expected;
  for (const char* collective : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}) {
    for (int64_t bytes : {64, 128, 256, 512, 1024})
      expected.push_back({"world", collective, bytes, n});
  }
  check_results(results, expected);
  check_same_on_every_rank(results);
  REQUIRE(reported.size() == results.size());
  for (size_t i = 0; i < results.size(); ++i) CHECK(reported[i].time_us == results[i].time_us);
}

TEST_CASE("Each grid axis with more than one rank is measured on its own groups") {
  const int n = world_size();
  // np2: pipe 1 x data 1 x model 2; np4: pipe 2 x data 1 x model 2.
  const auto groups = make_groups({n / 2, 1, 2});
  CommbenchOptions options = small_options();
  options.collectives = {Collective::all_reduce, Collective::all_to_all};
  options.groups = {Axis::world, Axis::data, Axis::tensor, Axis::pipeline};
  options.min_bytes = 256;
  options.max_bytes = 512;
  std::string error;
  const auto results = run_commbench(*groups, options, nullptr, error);
  REQUIRE(error.empty());

  std::vector<Expected> expected;
  for (const auto& [group, ranks] :
       std::vector<std::pair<std::string, int>>{{"world", n}, {"tensor", 2}, {"pipeline", n / 2}}) {
    if (ranks < 2) continue;  // the data axis, and the pipe axis at 2 ranks, have 1 rank
    for (const char* collective : {"all_reduce", "all_to_all"}) {
      for (int64_t bytes : {256, 512}) expected.push_back({group, collective, bytes, ranks});
    }
  }
  check_results(results, expected);
  check_same_on_every_rank(results);
}

TEST_CASE("Data-parallel groups are measured across pipeline stages") {
  const int n = world_size();
  const auto groups = make_groups({2, n / 2, 1});
  CommbenchOptions options = small_options();
  options.groups = {Axis::data, Axis::pipeline};
  options.collectives = {Collective::reduce_scatter};
  options.min_bytes = options.max_bytes = 1024;
  std::string error;
  const auto results = run_commbench(*groups, options, nullptr, error);
  REQUIRE(error.empty());
  std::vector<Expected> expected;
  if (n / 2 > 1) expected.push_back({"data", "reduce_scatter", 1024, n / 2});
  expected.push_back({"pipeline", "reduce_scatter", 1024, 2});
  check_results(results, expected);
}

TEST_CASE("Sizes too small to give every rank an element are skipped") {
  const int n = world_size();
  const auto groups = make_groups({1, 1, n});
  CommbenchOptions options = small_options();
  options.collectives = {Collective::all_gather, Collective::all_reduce};
  options.min_bytes = 4;
  options.max_bytes = 16;
  std::string error;
  const auto results = run_commbench(*groups, options, nullptr, error);
  REQUIRE(error.empty());
  std::vector<Expected> expected;
  for (int64_t bytes : {4, 8, 16}) {
    if (bytes / 4 >= n) expected.push_back({"world", "all_gather", bytes, n});
  }
  for (int64_t bytes : {4, 8, 16}) expected.push_back({"world", "all_reduce", bytes, n});
  check_results(results, expected);
}

TEST_CASE("A size range that does not double evenly stops below max_bytes") {
  const int n = world_size();
  const auto groups = make_groups({1, n, 1});
  CommbenchOptions options = small_options();
  options.collectives = {Collective::all_reduce};
  options.min_bytes = 100;
  options.max_bytes = 700;
  std::string error;
  const auto results = run_commbench(*groups, options, nullptr, error);
  REQUIRE(error.empty());
  check_results(results, {{"world", "all_reduce", 100, n},
                          {"world", "all_reduce", 200, n},
                          {"world", "all_reduce", 400, n}});
}

TEST_CASE("A wrong element in a real collective's output is found") {
  const int n = world_size();
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                       Collective::all_to_all}) {
    const auto m = *message_for(c, 4096, n);
    std::vector<float> in(m.send_count), out(m.recv_count, -1.0f);
    fill_input(c, rank, in);
    const int count = static_cast<int>(m.chunk);
    int rc = MPI_ERR_OTHER;
    switch (c) {
      case Collective::all_reduce:
        rc = MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
      case Collective::all_gather:
        rc = MPI_Allgather(in.data(), count, MPI_FLOAT, out.data(), count, MPI_FLOAT,
                           MPI_COMM_WORLD);
        break;
      case Collective::reduce_scatter:
        rc = MPI_Reduce_scatter_block(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM,
                                      MPI_COMM_WORLD);
        break;
      case Collective::all_to_all:
        rc =
            MPI_Alltoall(in.data(), count, MPI_FLOAT, out.data(), count, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    }
    REQUIRE(rc == MPI_SUCCESS);
    INFO(collective_name(c));
    CHECK(count_wrong(c, m, rank, n, out) == 0);
    out[rank] += 0.5f;
    CHECK(count_wrong(c, m, rank, n, out) == 1);
  }
}

TEST_CASE("Invalid options are refused before any communication") {
  const auto groups = make_groups({1, world_size(), 1});
  const auto refused = [&](CommbenchOptions options) {
    std::string error;
    const auto results = run_commbench(*groups, options, nullptr, error);
    CHECK(results.empty());
    return error;
  };
  CommbenchOptions options;
  options.min_bytes = 2;
  CHECK(refused(options) == "commbench min_bytes is 2; it must be at least 4 (one float32)");
  options = {};
  options.max_bytes = 512;
  CHECK(refused(options) == "commbench max_bytes (512) is below min_bytes (1024)");
  options = {};
  options.max_bytes = int64_t{1} << 34;
  CHECK(refused(options) ==
        "commbench max_bytes (17179869184) exceeds what one collective can send (8589934588 bytes)");
  options = {};
  options.iterations = 0;
  CHECK(refused(options) == "commbench iterations is 0; it must be at least 1");
  options = {};
  options.warmup = -1;
  CHECK(refused(options) == "commbench warmup is -1; it must be at least 0");
  options = {};
  options.collectives.clear();
  CHECK(refused(options) == "commbench needs at least one collective");
  options = {};
  options.groups.clear();
  CHECK(refused(options) == "commbench needs at least one group");
  CHECK(check_options(CommbenchOptions{}).empty());
}

TEST_CASE("Results print as an nccl-tests-like table") {
  CHECK(format_header() ==
        "group    collective       ranks      size(B)     time(us)  algbw(GB/s)  busbw(GB/s)  check");
  const CommbenchResult r{"data", "all_reduce", 1048576, 4, 250.0, 4.194304, 6.291456, true};
  CHECK(format_result(r) ==
        "data     all_reduce           4      1048576       250.00        4.194        6.291  ok");
  CommbenchResult wrong = r;
  wrong.correct = false;
  CHECK(format_result(wrong).ends_with("  WRONG"));
}

TEST_CASE("A stop asked for on one rank ends the benchmark on every rank after that measurement") {
  const auto groups = make_groups(GridShape{1, world_size(), 1});
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CommbenchOptions options = small_options();
  int measured = 0;
  // Only the last rank asks, after its second measurement.
  options.stop_requested = [&] { return rank == world_size() - 1 && measured >= 2; };
  std::string error;
  const auto results = run_commbench(
      *groups, options, [&](const CommbenchResult&) { ++measured; }, error);
  REQUIRE(error.empty());
  CHECK(results.size() == 2);
  CHECK(measured == 2);
}
