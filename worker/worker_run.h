#pragma once

namespace dslaunch::worker {

// `dsworker run`: one rank's life in a job started by `dslaunch run`.
// Everything comes from the environment the runner set (DSL_CONTROLLER,
// DSL_JOB_TOKEN, DSL_RESTART_COUNT, DSL_DEVICE, DSL_TLS_CA when the control
// plane uses TLS, and the launcher's rank
// variables): register with the controller, take the resolved spec and this
// rank's placement from it, bind to the planned cores, build the process
// groups, keep the session (heartbeats up; stop, checkpoint-now and
// dump-stacks down), run the job's workload, and report how it ended.
// Returns the process exit code: 0 done (or stopped on request), 1 the
// workload failed, 2 the environment or spec is unusable, 3 the controller
// was lost.
int run_worker();

}  // namespace dslaunch::worker
