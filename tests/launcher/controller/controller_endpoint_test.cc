// The controller's address choice, as a pure function, and a server started
// on the chosen address, which must not answer on this host's other ones.
#include "launcher/controller/controller_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "launcher/controller/controller_handler.h"
#include "launcher/controller/controller_server.h"
#include "proto/auth.h"

namespace dslaunch::controller {
namespace {

const std::vector<LocalAddress> kHost = {
    {"lo", "127.0.0.1"}, {"eth0", "10.0.0.5"}, {"ib0", "192.168.7.5"}};

TEST_CASE("a configured controller_address is bound exactly, never all interfaces") {
  ControllerEndpoint endpoint = choose_controller_endpoint("10.0.0.5:7000", "", false, kHost);
  CHECK(endpoint.bind == "10.0.0.5:7000");
  CHECK(endpoint.dial_host == "10.0.0.5");

  endpoint = choose_controller_endpoint("head-node", "", false, kHost);
  CHECK(endpoint.bind == "head-node:0");
  CHECK(endpoint.dial_host == "head-node");

  endpoint = choose_controller_endpoint("[fd00::5]:7000", "", false, kHost);
  CHECK(endpoint.bind == "[fd00::5]:7000");
  CHECK(endpoint.dial_host == "[fd00::5]");

  endpoint = choose_controller_endpoint("[fd00::5]", "", true, kHost);
  CHECK(endpoint.bind == "[fd00::5]:0");
  CHECK(endpoint.dial_host == "[fd00::5]");
}

TEST_CASE("a job whose hosts are all this machine binds loopback, which its ranks dial") {
  const ControllerEndpoint endpoint = choose_controller_endpoint("", "eth0", true, kHost);
  CHECK(endpoint.bind == "127.0.0.1:0");
  CHECK(endpoint.dial_host == "127.0.0.1");
}

TEST_CASE("a multi-host job binds the first non-loopback address, of the named interface") {
  ControllerEndpoint endpoint = choose_controller_endpoint("", "", false, kHost);
  CHECK(endpoint.bind == "10.0.0.5:0");
  CHECK(endpoint.dial_host == "10.0.0.5");

  endpoint = choose_controller_endpoint("", "ib0", false, kHost);
  CHECK(endpoint.error == "");
  CHECK(endpoint.bind == "192.168.7.5:0");
  CHECK(endpoint.dial_host == "192.168.7.5");
}

TEST_CASE("network_interface given as a subnet binds this host's address inside it") {
  ControllerEndpoint endpoint = choose_controller_endpoint("", "192.168.0.0/16", false, kHost);
  CHECK(endpoint.error == "");
  CHECK(endpoint.bind == "192.168.7.5:0");
  endpoint = choose_controller_endpoint("", "10.0.0.4/31", false, kHost);
  CHECK(endpoint.bind == "10.0.0.5:0");
  endpoint = choose_controller_endpoint("", "10.0.0.6/31", false, kHost);
  CHECK(endpoint.error.starts_with("cluster.network_interface '10.0.0.6/31' has no IPv4 address"));
  // Loopback stays out even inside the subnet.
  endpoint = choose_controller_endpoint("", "0.0.0.0/0", false, kHost);
  CHECK(endpoint.bind == "10.0.0.5:0");
}

TEST_CASE("an interface without a reachable IPv4 address is an error naming it and the fix") {
  ControllerEndpoint endpoint = choose_controller_endpoint("", "eth9", false, kHost);
  CHECK_FALSE(endpoint.ok());
  CHECK(endpoint.bind == "");
  CHECK(endpoint.error ==
        "cluster.network_interface 'eth9' has no IPv4 address that ranks on other hosts can "
        "reach (this host's IPv4 addresses: lo 127.0.0.1, eth0 10.0.0.5, ib0 192.168.7.5); "
        "name another interface, or set cluster.controller_address to host[:port]");

  endpoint = choose_controller_endpoint("", "lo", false, kHost);
  CHECK_FALSE(endpoint.ok());
  CHECK(endpoint.error.starts_with("cluster.network_interface 'lo' has no IPv4 address"));

  endpoint = choose_controller_endpoint("", "", false, {{"lo", "127.0.0.1"}});
  CHECK(endpoint.error ==
        "this host has no IPv4 address that ranks on other hosts can reach (its IPv4 "
        "addresses: lo 127.0.0.1); set cluster.controller_address to host[:port], or "
        "cluster.network_interface");
}

TEST_CASE("this host's addresses include loopback") {
  const std::vector<LocalAddress> addresses = local_ipv4_addresses();
  CHECK(std::any_of(addresses.begin(), addresses.end(),
                    [](const LocalAddress& a) { return a.ipv4 == "127.0.0.1"; }));
}

class NoHandler final : public ControllerHandler {
 public:
  grpc::Status register_rank(const v1::RegisterRequest&, v1::RegisterReply*) override {
    return grpc::Status::OK;
  }
  void session_opened(int, std::shared_ptr<CommandSink>) override {}
  void worker_message(const v1::WorkerMessage&) override {}
  void session_closed(int) override {}
  grpc::Status get_status(v1::JobStatus*) override { return grpc::Status::OK; }
  grpc::Status stop(const v1::StopRequest&, v1::StopReply*) override { return grpc::Status::OK; }
};

// Whether a TCP connection to ipv4:port is accepted.
bool accepts_connections(const std::string& ipv4, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  REQUIRE(inet_pton(AF_INET, ipv4.c_str(), &address.sin_addr) == 1);
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  const int error = errno;
  close(fd);
  if (!connected) CHECK(error == ECONNREFUSED);  // refused, not lost in a firewall
  return connected;
}

TEST_CASE("a controller told 127.0.0.1 answers there and on none of this host's other addresses") {
  const ControllerEndpoint endpoint =
      choose_controller_endpoint("127.0.0.1", "", false, local_ipv4_addresses());
  NoHandler handler;
  ControllerServerOptions options;
  options.token = proto::generate_token().token;
  ControllerServer server(handler, options);
  const StartResult started = server.start(endpoint.bind);
  REQUIRE(started.error == "");
  CHECK(accepts_connections("127.0.0.1", started.port));

  std::vector<std::string> others;
  for (const LocalAddress& address : local_ipv4_addresses()) {
    if (address.ipv4.rfind("127.", 0) != 0) others.push_back(address.ipv4);
  }
  if (others.empty()) WARN("this host has no IPv4 address but loopback: only loopback checked");
  for (const std::string& other : others) {
    INFO("address " << other);
    CHECK_FALSE(accepts_connections(other, started.port));
  }
  server.shutdown(std::chrono::milliseconds(0));
}

}  // namespace
}  // namespace dslaunch::controller
