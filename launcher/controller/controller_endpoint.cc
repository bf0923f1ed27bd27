#include "launcher/controller/controller_endpoint.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <optional>

#include <fmt/format.h>

#include "core/ipv4_subnet.h"

namespace dslaunch::controller {
namespace {

bool is_loopback(const std::string& ipv4) { return ipv4.rfind("127.", 0) == 0; }

std::string listed(const std::vector<LocalAddress>& addresses) {
  if (addresses.empty()) return "none";
  std::string out;
  for (const LocalAddress& address : addresses) {
    if (!out.empty()) out += ", ";
    out += address.interface + " " + address.ipv4;
  }
  return out;
}

}  // namespace

std::vector<LocalAddress> local_ipv4_addresses() {
  std::vector<LocalAddress> out;
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) return out;
  for (ifaddrs* entry = interfaces; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* address = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    inet_ntop(AF_INET, &address->sin_addr, text, sizeof(text));
    out.push_back({entry->ifa_name, text});
  }
  freeifaddrs(interfaces);
  return out;
}

ControllerEndpoint choose_controller_endpoint(const std::string& controller_address,
                                              const std::string& network_interface,
                                              bool all_hosts_local,
                                              const std::vector<LocalAddress>& addresses) {
  if (!controller_address.empty()) {
    const auto colon = controller_address.rfind(':');
    const bool has_port = colon != std::string::npos && controller_address.back() != ']';
    const std::string host = has_port ? controller_address.substr(0, colon) : controller_address;
    return {has_port ? controller_address : host + ":0", host, ""};
  }
  if (all_hosts_local) return {"127.0.0.1:0", "127.0.0.1", ""};
  const std::optional<core::Ipv4Subnet> subnet = core::Ipv4Subnet::parse(network_interface);
  for (const LocalAddress& address : addresses) {
    const bool named = subnet ? subnet->contains(address.ipv4)
                              : network_interface.empty() || address.interface == network_interface;
    if (!named) continue;
    if (!is_loopback(address.ipv4)) return {address.ipv4 + ":0", address.ipv4, ""};
  }
  if (!network_interface.empty()) {
    return {"", "",
            fmt::format("cluster.network_interface '{}' has no IPv4 address that ranks on other "
                        "hosts can reach (this host's IPv4 addresses: {}); name another "
                        "interface, or set cluster.controller_address to host[:port]",
                        network_interface, listed(addresses))};
  }
  return {"", "",
          fmt::format("this host has no IPv4 address that ranks on other hosts can reach (its "
                      "IPv4 addresses: {}); set cluster.controller_address to host[:port], or "
                      "cluster.network_interface",
                      listed(addresses))};
}

}  // namespace dslaunch::controller
