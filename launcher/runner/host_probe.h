#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace dslaunch::runner {

// Whether a host answers, and if not what was seen ("ssh: connect to host
// node2 port 22: No route to host").
struct HostProbe {
  std::string host;
  bool reachable = false;
  std::string detail;
};

// Asks every host at once whether it takes an ssh session (`ssh -p PORT
// -o BatchMode=yes -o ConnectTimeout=T HOST true`), as mpirun's own start
// over ssh would need; a host that has not answered within `timeout` (plus a
// grace for the session itself) is unreachable. At most 64 probes run at a
// time. In the order of `hosts`.
std::vector<HostProbe> probe_hosts_over_ssh(const std::vector<std::string>& hosts, int ssh_port,
                                            std::chrono::seconds timeout);

}  // namespace dslaunch::runner
