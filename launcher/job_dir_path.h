#pragma once

#include <optional>
#include <string>

namespace dslaunch::launcher {

// A job directory named on the command line (`run --job-dir DIR`, or a
// directory given as JOB), made absolute and normal, since its last
// component is the job id: "runs/a/", "runs//a//" and "./runs/a" all give
// "<working dir>/runs/a". nullopt with `error` set for "" and "/", which have
// no name to be a job id.
std::optional<std::string> normalized_job_dir(const std::string& dir, std::string& error);

}  // namespace dslaunch::launcher
