#include "worker/rank_environment.h"

#include <map>
#include <string>

#include <catch2/catch.hpp>

namespace dslaunch::worker {
namespace {

std::function<const char*(const char*)> environment(std::map<std::string, std::string> values) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(values));
  return [shared](const char* name) -> const char* {
    const auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

std::tuple<int, int, int, int> as_tuple(const RankEnvironment& e) {
  return {e.rank, e.local_rank, e.world_size, e.local_world_size};
}

TEST_CASE("the plan's device gives the rank's GPU index") {
  CHECK(planned_gpu("cuda:0") == 0);
  CHECK(planned_gpu("cuda:7") == 7);
  CHECK(planned_gpu("cuda:12") == 12);
  CHECK_FALSE(planned_gpu("cpu").has_value());
  CHECK_FALSE(planned_gpu("cuda:").has_value());
  CHECK_FALSE(planned_gpu("cuda:x1").has_value());
  CHECK_FALSE(planned_gpu("cuda:-1").has_value());
  CHECK_FALSE(planned_gpu("cuda:99999999999").has_value());
}

}  // namespace

TEST_CASE("Open MPI's variables give the rank, and win over stale torchrun ones") {
  std::string error;
  const auto env = read_rank_environment(environment({{"OMPI_COMM_WORLD_RANK", "5"},
                                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                      {"OMPI_COMM_WORLD_SIZE", "8"},
                                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                                      {"RANK", "0"},
                                                      {"WORLD_SIZE", "1"}}),
                                         error);
  REQUIRE(env);
  CHECK(as_tuple(*env) == std::tuple{5, 1, 8, 4});
}

TEST_CASE("srun's variables give the rank, with this node's entry of the tasks per node") {
  std::string error;
  const auto env = read_rank_environment(environment({{"SLURM_PROCID", "9"},
                                                      {"SLURM_LOCALID", "1"},
                                                      {"SLURM_NTASKS", "11"},
                                                      {"SLURM_NODEID", "3"},
                                                      {"SLURM_STEP_TASKS_PER_NODE", "4(x2),1,2"}}),
                                         error);
  REQUIRE(env);
  CHECK(as_tuple(*env) == std::tuple{9, 1, 11, 2});
}

TEST_CASE("torchrun-style variables are used when no launcher set its own") {
  std::string error;
  const auto env = read_rank_environment(
      environment(
          {{"RANK", "1"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
      error);
  REQUIRE(env);
  CHECK(as_tuple(*env) == std::tuple{1, 1, 2, 2});
}

TEST_CASE("missing or inconsistent rank variables are an error naming them") {
  std::string error;
  CHECK_FALSE(read_rank_environment(environment({}), error));
  CHECK(error.find("dsworker run is started by `dslaunch run`") != std::string::npos);
  CHECK_FALSE(read_rank_environment(environment({{"OMPI_COMM_WORLD_RANK", "4"},
                                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                                 {"OMPI_COMM_WORLD_SIZE", "4"},
                                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}),
                                    error));
  CHECK(error.find("OMPI_COMM_WORLD_RANK") != std::string::npos);
  CHECK_FALSE(read_rank_environment(
      environment({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "2"}}), error));
  CHECK(error.find("SLURM_STEP_TASKS_PER_NODE with SLURM_NODEID") != std::string::npos);
}

TEST_CASE("compute threads: OMP_NUM_THREADS, else the bound cores, else a share of the machine") {
  CHECK(compute_threads(environment({{"OMP_NUM_THREADS", "3"}}), 8, 16, 2) == 3);
  CHECK(compute_threads(environment({}), 8, 16, 2) == 8);
  CHECK(compute_threads(environment({}), 0, 16, 4) == 4);
  CHECK(compute_threads(environment({}), 0, 2, 4) == 1);
  // Not a positive whole number: ignored, as OpenMP itself would not use it.
  for (const char* value : {"0", "-2", "2x", "", "two"}) {
    CHECK(compute_threads(environment({{"OMP_NUM_THREADS", value}}), 0, 16, 2) == 8);
  }
}

}  // namespace dslaunch::worker
