#include "worker/worker_run.h"

#include <cstdlib>

#include <catch2/catch.hpp>

namespace dslaunch::worker {

TEST_CASE("dsworker run takes the job token out of its environment before anything starts") {
  // No launcher's rank variables here, so run_worker gives up early (exit
  // code 2): the token must be gone all the same.
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "RANK", "DSL_CONTROLLER"}) {
    unsetenv(name);
  }
  setenv("DSL_JOB_TOKEN", "job-secret", 1);
  CHECK(run_worker() == 2);
  CHECK(std::getenv("DSL_JOB_TOKEN") == nullptr);
}

}  // namespace dslaunch::worker
