#include "launcher/controller/metrics_endpoint.h"

#include <httplib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

namespace {

namespace fs = std::filesystem;
using dslaunch::controller::MetricsEndpoint;

std::unique_ptr<MetricsEndpoint> started(const std::string& token) {
  auto endpoint = MetricsEndpoint::start(0, [] { return std::string("dslaunch_up 1\n"); }, token);
  REQUIRE(endpoint.ok());
  return std::move(*endpoint);
}

fs::path write(const std::string& name, const std::string& text) {
  const fs::path path = fs::path(std::getenv("TEST_TMPDIR")) / name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("without a token the endpoint answers every scrape") {
  const auto endpoint = started("");
  httplib::Client client("127.0.0.1", endpoint->port());
  const auto response = client.Get("/metrics");
  REQUIRE(response);
  CHECK(response->status == 200);
  CHECK(response->body == "dslaunch_up 1\n");
  CHECK(response->get_header_value("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
}

TEST_CASE("with a token a scrape without it, or with another, gets 401 and no metrics") {
  const auto endpoint = started("s3cret-token");
  httplib::Client client("127.0.0.1", endpoint->port());
  const auto bare = client.Get("/metrics");
  REQUIRE(bare);
  CHECK(bare->status == 401);
  CHECK(bare->get_header_value("WWW-Authenticate") == "Bearer realm=\"dslaunch\"");
  CHECK(bare->body.find("dslaunch_up") == std::string::npos);
  for (const char* header :
       {"Bearer s3cret-tokem", "Bearer s3cret", "Bearer s3cret-token2", "Basic s3cret-token",
        "s3cret-token", "Bearer"}) {
    INFO(header);
    const auto wrong = client.Get("/metrics", {{"Authorization", header}});
    REQUIRE(wrong);
    CHECK(wrong->status == 401);
  }
  // The scheme's name is case-insensitive (RFC 7235).
  for (const char* header : {"Bearer s3cret-token", "bearer s3cret-token"}) {
    INFO(header);
    const auto right = client.Get("/metrics", {{"Authorization", header}});
    REQUIRE(right);
    CHECK(right->status == 200);
    CHECK(right->body == "dslaunch_up 1\n");
  }
}

TEST_CASE("a token file is read as Prometheus reads one, and a bad one is refused by name") {
  const auto token = MetricsEndpoint::read_token_file(write("token", "  abc-123\n\n").string());
  REQUIRE(token.ok());
  CHECK(token.value() == "abc-123");

  const fs::path blank = write("blank", " \n\t\n");
  const auto empty = MetricsEndpoint::read_token_file(blank.string());
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.status().message() ==
        "cluster.metrics_token_file: '" + blank.string() + "' holds no token");

  const auto missing = MetricsEndpoint::read_token_file("/no/such/token");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message() ==
        "cluster.metrics_token_file: cannot read '/no/such/token': No such file or directory");
}
