#include "worker/comm/comms_summary.h"

#include <fmt/format.h>

namespace dslaunch::worker::comm {

std::string comms_summary(const std::map<std::string, CommStats>& by_axis) {
  std::string text = fmt::format("{:<16} {:<15} {:>8} {:>12} {:>12} {:>11} {:>11} {:>10} {:>10}\n",
                                 "group", "operation", "calls", "total MB", "mean KB", "total ms",
                                 "mean ms", "algbw GB/s", "busbw GB/s");
  const auto per_second = [](double bytes, double seconds) {
    return seconds > 0 ? fmt::format("{:.3f}", bytes / seconds / 1e9) : std::string("-");
  };
  for (const auto& [axis, stats] : by_axis) {
    for (int kind = 0; kind < kOpKindCount; ++kind) {
      const CommStats::Op& op = stats.ops[kind];
      if (op.calls == 0) continue;
      const auto bytes = static_cast<double>(op.bytes);
      text += fmt::format(
          "{:<16} {:<15} {:>8} {:>12.3f} {:>12.2f} {:>11.2f} {:>11.3f} {:>10} {:>10}\n", axis,
          op_name(static_cast<OpKind>(kind)), op.calls, bytes / 1e6,
          bytes / static_cast<double>(op.calls) / 1e3, op.seconds * 1e3,
          op.seconds * 1e3 / static_cast<double>(op.calls), per_second(bytes, op.seconds),
          per_second(static_cast<double>(op.wire_bytes), op.seconds));
    }
  }
  return text;
}

}  // namespace dslaunch::worker::comm
