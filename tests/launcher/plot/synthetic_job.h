#pragma once

#include <string>

namespace dslaunch::plot::testing {

// Rank 0's loss at `step` of attempt `attempt` in the job below: the two
// attempts' values differ at every step, so a test can tell which one a
// point came from. Rank 1 reports a loss of 100 throughout.
double synthetic_loss(int attempt, int step);

// Writes, with the controller's own writers (JobDirectory, status_to_json),
// the directory <root>/<job_id> of a two-rank training job named
// `name` as the controller leaves it after a restart: attempt 0 trains
// steps 1-12 (an evaluation every 5 steps, a checkpoint at step 8) and
// fails when rank 1 exits; attempt 1 resumes from the checkpoint of step 8,
// trains steps 9-20 again and succeeds. Returns the job directory; fails the
// test on error.
std::string write_two_attempt_job(const std::string& root, const std::string& job_id,
                                  const std::string& name);

}  // namespace dslaunch::plot::testing
