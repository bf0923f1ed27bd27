#pragma once

#include <string>
#include <vector>

// Where the controller's server listens and the address its ranks dial.
namespace dslaunch::controller {

// One IPv4 address of this host and the interface that carries it.
struct LocalAddress {
  std::string interface;
  std::string ipv4;
};

// This host's IPv4 addresses (getifaddrs), loopback included.
std::vector<LocalAddress> local_ipv4_addresses();

struct ControllerEndpoint {
  std::string bind;       // "host:port" for ControllerServer::start; port 0: the OS picks
  std::string dial_host;  // the host ranks dial, with the bound port
  std::string error;      // why no address could be chosen, and the fix
  bool ok() const { return error.empty(); }
};

// The server binds exactly the address it tells the ranks, never every
// interface:
// - `controller_address` ("host[:port]", "[v6]:port") when set;
// - else 127.0.0.1 when every host is this machine (its ranks dial loopback);
// - else the first IPv4 address in `addresses` that is not loopback and is
//   on `network_interface` (an interface name, or an IPv4 subnet such as
//   10.0.0.0/16 that holds it; any interface when empty); an error when
//   there is none.
ControllerEndpoint choose_controller_endpoint(const std::string& controller_address,
                                              const std::string& network_interface,
                                              bool all_hosts_local,
                                              const std::vector<LocalAddress>& addresses);

}  // namespace dslaunch::controller
