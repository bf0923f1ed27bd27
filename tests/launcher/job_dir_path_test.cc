#include "launcher/job_dir_path.h"

#include <filesystem>

#include <catch2/catch.hpp>

namespace dslaunch::launcher {

TEST_CASE("a job directory with trailing or doubled slashes names the same folder") {
  const std::string cwd = std::filesystem::current_path().string();
  std::string error;
  for (const std::string given : {"runs/a", "runs/a/", "runs//a//", "./runs/a", "runs/b/../a/"}) {
    INFO(given);
    CHECK(normalized_job_dir(given, error) == cwd + "/runs/a");
  }
  CHECK(normalized_job_dir("/tmp/jobs/x/", error) == "/tmp/jobs/x");
  CHECK(normalized_job_dir("/tmp/jobs/x", error) == "/tmp/jobs/x");
}

TEST_CASE("an empty job directory, or the root folder, is refused with what to give instead") {
  std::string error;
  CHECK_FALSE(normalized_job_dir("", error));
  CHECK(error.find("the job directory is empty; give a folder such as ./my-job") !=
        std::string::npos);
  for (const std::string root : {"/", "//", "/tmp/.."}) {
    INFO(root);
    error.clear();
    CHECK_FALSE(normalized_job_dir(root, error));
    CHECK(error.find("is the root folder, which cannot be a job directory") != std::string::npos);
  }
}

}  // namespace dslaunch::launcher
