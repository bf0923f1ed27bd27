// The ssh probe against a stand-in `ssh` on PATH: a host that takes the
// session, one that refuses it, and one that never answers.
#include "launcher/runner/host_probe.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

namespace dslaunch::runner {
namespace {

namespace fs = std::filesystem;

// Puts a fake ssh first on PATH, which logs its arguments; the host is the
// last but one (before the command).
void install_fake_ssh() {
  const fs::path bin = fs::path(std::getenv("TEST_TMPDIR")) / "bin";
  fs::create_directories(bin);
  std::ofstream(bin / "ssh") << R"(#!/bin/sh
echo "$@" >> "$(dirname "$0")/calls"
eval "host=\${$(($# - 1))}"
case "$host" in
  up-*) exit 0 ;;
  refusing) echo "ssh: connect to host refusing port 2222: Connection refused" >&2; exit 255 ;;
  silent) sleep 60 ;;
esac
exit 1
)";
  fs::permissions(bin / "ssh", fs::perms::owner_all);
  setenv("PATH", (bin.string() + ":/usr/bin:/bin").c_str(), 1);
}

TEST_CASE("hosts are probed over ssh at once: reachable, refusing, silent") {
  install_fake_ssh();
  const auto start = std::chrono::steady_clock::now();
  const std::vector<HostProbe> probes =
      probe_hosts_over_ssh({"up-1", "refusing", "silent", "up-2"}, 2222, std::chrono::seconds(1));
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(probes.size() == 4);
  CHECK(probes[0].host == "up-1");
  CHECK(probes[0].reachable);
  CHECK(probes[0].detail.empty());
  CHECK_FALSE(probes[1].reachable);
  CHECK(probes[1].detail == "ssh: connect to host refusing port 2222: Connection refused");
  CHECK_FALSE(probes[2].reachable);
  CHECK(probes[2].detail == "no answer over ssh within 6s");
  CHECK(probes[3].reachable);
  // In parallel: the silent host's bound, not the sum of all.
  CHECK(took < std::chrono::seconds(12));

  std::ifstream calls(fs::path(std::getenv("TEST_TMPDIR")) / "bin" / "calls");
  std::string line;
  std::getline(calls, line);
  CHECK(line.find("-p 2222 -o BatchMode=yes -o ConnectTimeout=1 ") == 0);
}

}  // namespace
}  // namespace dslaunch::runner
