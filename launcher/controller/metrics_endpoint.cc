#include "launcher/controller/metrics_endpoint.h"

#include <httplib.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>

#include <fmt/format.h>

namespace dslaunch::controller {

MetricsEndpoint::MetricsEndpoint() : server_(std::make_unique<httplib::Server>()) {}

namespace {

// Compares in time that depends on the lengths only, so that the answer's
// timing does not tell how much of a guessed token was right.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return difference == 0;
}

// Whether an Authorization header carries `token` with the Bearer scheme,
// whose name is case-insensitive (RFC 7235).
bool bears(std::string_view header, std::string_view token) {
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return false;
  }
  return same_secret(header.substr(kScheme.size()), token);
}

}  // namespace

core::StatusOr<std::string> MetricsEndpoint::read_token_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return core::Status(core::StatusCode::kNotFound,
                        fmt::format("cluster.metrics_token_file: cannot read '{}': {}", path,
                                    std::strerror(errno)));
  }
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const size_t first = text.find_first_not_of(" \t\r\n");
  const size_t last = text.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) {
    return core::invalid_argument(
        fmt::format("cluster.metrics_token_file: '{}' holds no token", path));
  }
  return text.substr(first, last - first + 1);
}

core::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::start(
    int port, std::function<std::string()> render, std::string bearer_token) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  MetricsEndpoint* self = endpoint.get();
  self->server_->Get("/metrics", [render = std::move(render), token = std::move(bearer_token)](
                                     const httplib::Request& request,
                                     httplib::Response& response) {
    if (!token.empty() && !bears(request.get_header_value("Authorization"), token)) {
      response.status = 401;
      response.set_header("WWW-Authenticate", "Bearer realm=\"dslaunch\"");
      response.set_content("a bearer token is needed (cluster.metrics_token_file)\n",
                           "text/plain; charset=utf-8");
      return;
    }
    response.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  if (port == 0) {
    self->port_ = self->server_->bind_to_any_port("0.0.0.0");
  } else if (self->server_->bind_to_port("0.0.0.0", port)) {
    self->port_ = port;
  }
  if (self->port_ <= 0) {
    return core::Status(
        core::StatusCode::kFailedPrecondition,
        fmt::format("cluster.metrics_port: cannot listen on port {} (in use, or below 1024 "
                    "without the right to)",
                    port));
  }
  self->thread_ = std::thread([self] { self->server_->listen_after_bind(); });
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace dslaunch::controller
