#pragma once

// The controller's timing knobs, in one place. The job spec sets the ones a
// user tunes (heartbeat_interval, heartbeat_timeout, step_timeout,
// collective_timeout); these are the controller's own, chosen so that a
// healthy job never notices them and a failed one is torn down in seconds.

#include <chrono>

namespace dslaunch::controller::timing {

using namespace std::chrono_literals;

// How long the controller's loop waits for rank output before it looks at
// signals, heartbeats and deadlines again.
inline constexpr auto kOutputPoll = 100ms;
// How often state.json and the progress display are refreshed.
inline constexpr auto kStateWriteInterval = 1s;
// After asking a hung job's ranks for their stacks: how long to collect them
// before the teardown.
inline constexpr auto kStackCollection = 3s;
// After the launcher ends: how long its ranks' last output is read.
inline constexpr auto kOutputDrain = 2s;
inline constexpr auto kOutputDrainPoll = 50ms;
// The gRPC server's shutdown deadline: before any rank started, and at the
// end of a job (ranks may still be sending their last messages).
inline constexpr auto kServerShutdownBeforeLaunch = 1s;
inline constexpr auto kServerShutdownAfterJob = 2s;
// Between failed attempts: 1, 2, 4, ... seconds, at most this (torchrun and
// Kubernetes back off likewise).
inline constexpr auto kMaxRestartBackoff = 30s;
// How often the backoff checks for an interrupt.
inline constexpr auto kBackoffPoll = 50ms;
// After a multi-host attempt failed: how long each host gets to answer ssh
// before it counts as lost (OpenSSH's ConnectTimeout; the session adds a
// few seconds), and how often a lost host is asked again while the job
// waits for it.
inline constexpr std::chrono::seconds kHostProbeTimeout = 3s;
inline constexpr auto kLostHostPoll = 2s;

}  // namespace dslaunch::controller::timing
