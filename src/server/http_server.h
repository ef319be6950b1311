// HttpServer: the workers' HTTP front on cpp-httplib 0.11 (Debian 12's libcpp-httplib; docs/DESIGN.md
// section 1). It adds what both workers need around the library: bearer-token auth on every route but the public ones,
// a body size limit, read/write/keep-alive timeouts, JSON error bodies for every 4xx/5xx (including the
// library's own 404/413/400), exception-to-status mapping so no handler fault reaches the process, and request
// counts by route and status in Metrics.
//
// Threading: one thread per connection from a pool of `threads` (a Server-Sent Events stream holds its thread
// for the stream's life, so size it above the number of concurrent streams).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/metrics.h"

namespace rbee::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0: any free port (see HttpServer::port())
  int threads = 64;                     // connection threads
  size_t max_body_bytes = 1 << 20;      // larger bodies get 413
  int read_timeout_s = 10;              // a client that stalls while sending its request is dropped
  int write_timeout_s = 30;             // a client that stops reading a response is dropped (its job cancelled)
  int keep_alive_timeout_s = 5;
  int keep_alive_max_count = 100;
  std::string api_token;                // non-empty: "Authorization: Bearer <token>" required
  std::vector<std::string> public_paths = {"/health"};  // exact paths that never need the token
  // Exact GET paths that also accept the token as "?token=<token>": a browser opening the chat page cannot send
  // an Authorization header; the page then sends the header itself on every API call.
  std::vector<std::string> query_token_paths;
};

class HttpServer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  HttpServer(HttpOptions options, Metrics& metrics);
  ~HttpServer();

  // pattern: an ECMAScript regex for the whole path (httplib matches it against req.path; groups land in
  // req.matches); label: the route as it appears in metrics ("/v1/jobs/{id}/stream").
  void get(const std::string& pattern, const std::string& label, Handler handler);
  void post(const std::string& pattern, const std::string& label, Handler handler);
  void del(const std::string& pattern, const std::string& label, Handler handler);

  // Binds the listening socket; throws Error(Io) naming host and port when it cannot.
  void bind();
  int port() const { return port_; }
  // Serves until stop(); call after bind(), typically on its own thread.
  void run();
  // Stops accepting, lets requests in flight finish their current write, and makes run() return, also when
  // run() is called, or reaches its loop, only after stop() (a model that fails to load right after start-up).
  void stop();

 private:
  void add(const std::string& method, const std::string& pattern, const std::string& label, Handler handler);
  std::string route_label(const httplib::Request& req) const;

  HttpOptions options_;
  Metrics& metrics_;
  httplib::Server server_;
  struct Route {
    std::string method;
    std::regex pattern;
    std::string label;
  };
  std::vector<Route> routes_;
  int port_ = 0;
  std::atomic<bool> run_called_{false}, run_done_{false}, stop_requested_{false};
};

// Response helpers.
void send_json(httplib::Response& res, int status, const nlohmann::json& body);
void send_error(httplib::Response& res, const ApiError& error);
// Maps whatever a handler threw to the response: ApiError as is, rbee::Error by category, anything else 500.
void send_exception(httplib::Response& res, std::exception_ptr error);

}  // namespace rbee::server
