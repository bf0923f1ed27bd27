#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"

namespace httplib {
class Server;
}

namespace dslaunch::controller {

// The controller's Prometheus endpoint (cluster.metrics_port): GET /metrics
// answers what `render` returns at that moment, over plain HTTP, on every
// interface (a scraper runs elsewhere; it serves metrics only, no control).
// With a bearer token, a request without "Authorization: Bearer <token>" is
// answered 401 (Prometheus sends it with authorization.credentials_file).
// The server runs on a thread of its own, calling `render` there, until the
// endpoint is destroyed.
class MetricsEndpoint {
 public:
  // Listens on `port` (0: a port the OS picks); fails, naming the port,
  // when it cannot bind. `render` must be thread-safe and outlive the
  // endpoint. An empty `bearer_token` asks for none.
  static core::StatusOr<std::unique_ptr<MetricsEndpoint>> start(
      int port, std::function<std::string()> render, std::string bearer_token = "");
  ~MetricsEndpoint();

  int port() const { return port_; }

  // The token in `path` (cluster.metrics_token_file): its text, surrounding
  // white space removed, as Prometheus reads a credentials file. Fails,
  // naming the file, when it cannot be read or holds no token.
  static core::StatusOr<std::string> read_token_file(const std::string& path);

 private:
  MetricsEndpoint();

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace dslaunch::controller
