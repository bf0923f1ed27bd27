#pragma once

// The worker's timing knobs, in one place (the job spec sets the heartbeat
// interval and the collective timeout; these are the worker's own).

#include <chrono>

namespace dslaunch::worker::timing {

using namespace std::chrono_literals;

// After reporting a collective past its timeout, a rank waits this long for
// the controller to collect its stack and end the job before ending itself.
inline constexpr auto kHungRankGrace = 60s;
// Registration retries while the controller is not reachable yet (it starts
// before the ranks, but a busy host may delay it): this first wait,
// doubling, this many attempts (about 16 s in all).
inline constexpr auto kRegisterFirstBackoff = 250ms;
inline constexpr int kRegisterAttempts = 6;
// How long a stack capture of the training thread may take.
inline constexpr auto kStackCaptureTimeout = 2s;
// The shortest heartbeat interval a rank keeps, whatever the controller asks.
inline constexpr auto kMinHeartbeatInterval = 100ms;

}  // namespace dslaunch::worker::timing
