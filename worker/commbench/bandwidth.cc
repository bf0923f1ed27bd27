#include "worker/commbench/bandwidth.h"

namespace dslaunch::worker::commbench {

double bus_factor(Collective collective, int ranks) {
  const double n = ranks;
  // All-reduce is a reduce-scatter then an all-gather: twice the traffic.
  if (collective == Collective::all_reduce) return 2 * (n - 1) / n;
  return (n - 1) / n;
}

Bandwidth bandwidth(Collective collective, int64_t bytes, int ranks, double seconds) {
  if (seconds <= 0) return {};
  const double algbw = static_cast<double>(bytes) / 1e9 / seconds;
  return {algbw, algbw * bus_factor(collective, ranks)};
}

}  // namespace dslaunch::worker::commbench
