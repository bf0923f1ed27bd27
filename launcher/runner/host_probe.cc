#include "launcher/runner/host_probe.h"

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

namespace dslaunch::runner {
namespace {

constexpr size_t kMaxConcurrentProbes = 64;

// The last non-empty line of `text`.
std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\r\n");
  if (end == std::string::npos) return "";
  const size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1,
                     end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

HostProbe probe(const std::string& host, int ssh_port, std::chrono::seconds timeout) {
  HostProbe result{host, false, ""};
  // Host names are checked by the planner (letters, digits, '-', '.', '_'),
  // so they need no quoting; `timeout` bounds a session that connects but
  // never ends.
  const std::string command =
      fmt::format("timeout -k 1 {} ssh -p {} -o BatchMode=yes -o ConnectTimeout={} {} true 2>&1",
                  timeout.count() + 5, ssh_port, timeout.count(), host);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    result.detail = "cannot start ssh";
    return result;
  }
  std::string output;
  std::array<char, 1024> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  const int code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.reachable = code == 0;
  if (!result.reachable) {
    result.detail = last_line(output);
    if (code == 124 || code == 137) {
      result.detail = fmt::format("no answer over ssh within {}s", timeout.count() + 5);
    } else if (result.detail.empty()) {
      result.detail = fmt::format("ssh ended with code {}", code);
    }
  }
  return result;
}

}  // namespace

std::vector<HostProbe> probe_hosts_over_ssh(const std::vector<std::string>& hosts, int ssh_port,
                                            std::chrono::seconds timeout) {
  std::vector<HostProbe> results(hosts.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (size_t w = 0; w < std::min(hosts.size(), kMaxConcurrentProbes); ++w) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < hosts.size(); i = next++) {
        results[i] = probe(hosts[i], ssh_port, timeout);
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  return results;
}

}  // namespace dslaunch::runner
