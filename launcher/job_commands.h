#pragma once

#include <optional>
#include <string>

#include "launcher/controller/job_directory.h"

namespace dslaunch::launcher {

// The commands that look at jobs started by `dslaunch run`. A JOB is a job
// id under the jobs root ($DSLAUNCH_HOME/jobs or ~/.dslaunch/jobs), a unique
// prefix of one, or the path of a job directory. While a job runs, status
// and stop talk to its controller over gRPC with the job's token; once it
// ended (or when its controller does not answer), status reads state.json.
// Each returns the process exit code: 0, 1 (the job or its controller could
// not be reached as asked), 2 (bad input, such as an unknown job).

// The job directory JOB names, or nullopt with `error` set.
std::optional<controller::JobDirectory> find_job(const std::string& job, std::string& error);

// `dslaunch status [JOB] [--json]`: one row per job, or one row per rank.
int run_status_command(const std::optional<std::string>& job, bool json);

// `dslaunch list`: every job's id, state, start time and name.
int run_list_command();

// `dslaunch stop JOB [--now]`: graceful (the ranks checkpoint after their
// current step and exit; the job ends STOPPED, resumable), or at once.
int run_stop_command(const std::string& job, bool now);

// `dslaunch checkpoint JOB`: asks a running training job for a checkpoint
// after its next step; the controller commits it once every rank's shard is
// written (`status` then shows it as the last checkpoint).
int run_checkpoint_command(const std::string& job);

// `dslaunch resume JOB`: the job's directory when the job can be resumed:
// it exists and is not running (its controller does not answer, as after
// `dslaunch` itself was killed). nullopt with `error` set otherwise.
std::optional<std::string> resumable_job_dir(const std::string& job, std::string& error);

// `dslaunch logs JOB [--rank N] [--attempt K] [--follow]`: the latest
// attempt's output, or attempt K's (0 = the first).
// With --rank, that rank's stdout on stdout and stderr on stderr; without,
// every rank's lines prefixed "rank N | ". --follow keeps printing new lines
// until the job has ended.
int run_logs_command(const std::string& job, std::optional<int> rank,
                     std::optional<int> attempt, bool follow);

}  // namespace dslaunch::launcher
