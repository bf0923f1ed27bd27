#include "launcher/controller/metrics_endpoint.h"

#include <httplib.h>

#include <fmt/format.h>

namespace dslaunch::controller {

MetricsEndpoint::MetricsEndpoint() : server_(std::make_unique<httplib::Server>()) {}

core::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::start(
    int port, std::function<std::string()> render) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  MetricsEndpoint* self = endpoint.get();
  self->server_->Get("/metrics", [render = std::move(render)](const httplib::Request&,
                                                              httplib::Response& response) {
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
