#include "launcher/runner/exported_environment.h"

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

namespace dslaunch::runner {
namespace {

namespace fs = std::filesystem;
using Variables = std::map<std::string, std::string>;

std::string write(const std::string& name, const std::string& text) {
  const fs::path path = fs::path(std::getenv("TEST_TMPDIR")) / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST_CASE("the variables DeepSpeed forwards reach the ranks, and nothing else") {
  Variables out;
  std::string error;
  REQUIRE(exported_environment(
      {"NCCL_IB_HCA=mlx5_0", "UCX_TLS=rc", "PYTHONPATH=/x", "MLFLOW_RUN=1", "MV2_ENABLE=1",
       "OMP_NUM_THREADS=4", "OPENBLAS_NUM_THREADS=1", "CUDA_DEVICE_MAX_CONNECTIONS=1",
       "CUDA_VISIBLE_DEVICES=3", "HOME=/root", "PATH=/bin", "SECRET=x", "DSL_JOB_TOKEN=t",
       "EMPTY=", "NCCL_EMPTY=", "broken", "DSLAUNCH_LOG_LEVEL=debug", "DSLAUNCH_HOME=/h"},
      {}, out, error));
  CHECK(out == Variables{{"CUDA_DEVICE_MAX_CONNECTIONS", "1"},
                         {"DSLAUNCH_LOG_LEVEL", "debug"},
                         {"MLFLOW_RUN", "1"},
                         {"MV2_ENABLE", "1"},
                         {"NCCL_EMPTY", ""},
                         {"NCCL_IB_HCA", "mlx5_0"},
                         {"OMP_NUM_THREADS", "4"},
                         {"OPENBLAS_NUM_THREADS", "1"},
                         {"PYTHONPATH", "/x"},
                         {"UCX_TLS", "rc"}});
}

TEST_CASE(".deepspeed_env files add variables, the later file overriding") {
  const std::string home = write("home_env", "# cluster settings\n\nNCCL_DEBUG=WARN\nFOO=a=b\r\n");
  const std::string here = write("here_env", "NCCL_DEBUG=INFO\nBAR= spaced value \n");
  Variables out;
  std::string error;
  REQUIRE(exported_environment({"NCCL_DEBUG=TRACE", "NCCL_ALGO=Ring"},
                               {home, "/no/such/.deepspeed_env", here}, out, error));
  CHECK(out == Variables{{"BAR", " spaced value "},
                         {"FOO", "a=b"},
                         {"NCCL_ALGO", "Ring"},
                         {"NCCL_DEBUG", "INFO"}});
}

TEST_CASE("a malformed .deepspeed_env line is an error naming the file and line") {
  const std::string bad = write("bad_env", "GOOD=1\nexport BAD=2\n");
  Variables out;
  std::string error;
  CHECK_FALSE(exported_environment({}, {bad}, out, error));
  CHECK(error == bad +
                     ":2: error: expected NAME=VALUE (a variable for every rank, as DeepSpeed's "
                     ".deepspeed_env holds), not 'export BAD=2'");
  const std::string no_name = write("no_name_env", "=1\n");
  CHECK_FALSE(exported_environment({}, {no_name}, out, error));
  CHECK(error.find(":1: error:") != std::string::npos);
}

TEST_CASE("DeepSpeed's environment files are looked for in the home and working folders") {
  CHECK(deepspeed_env_files("/home/u", nullptr) ==
        std::vector<std::string>{"/home/u/.deepspeed_env", "./.deepspeed_env"});
  CHECK(deepspeed_env_files("/home/u", "my_env") ==
        std::vector<std::string>{"/home/u/my_env", "./my_env"});
  CHECK(deepspeed_env_files("/home/u", "/etc/ds_env") == std::vector<std::string>{"/etc/ds_env"});
  CHECK(deepspeed_env_files(nullptr, "") == std::vector<std::string>{"./.deepspeed_env"});
}

}  // namespace
}  // namespace dslaunch::runner
