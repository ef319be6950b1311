// HttpServer: the workers' HTTP/1.1 front. Connections are read by one event loop (Boost.Asio, requests parsed by
// Boost.Beast's parser, both from Debian's libboost-dev); only a request that has fully arrived takes a handler
// thread. So slow, idle or abusive connections cost a socket and a small buffer, never a thread, and /health and
// running streams keep their pace while hundreds of them are open (issue 13).
//
// What it adds around the handlers:
// - deadlines, not per-read timeouts: a request's header must arrive within read_timeout_s, its body within
//   read_timeout_s plus a second per 256 KiB; an idle keep-alive connection is closed after keep_alive_timeout_s;
//   a client that stops reading a response is dropped after write_timeout_s without progress;
// - connection caps: max_connections in total, max_connections_per_client per remote address (beyond: 503, closed);
// - bearer-token auth on every route but the public ones (scheme case-insensitive, RFC 7235); a refused request's
//   body is read and dropped before the 401, so a keep-alive connection stays in step (or it is closed);
// - 404 for an unknown path, 405 with Allow for a known path and a wrong method, OPTIONS (CORS preflight and Allow),
//   CORS headers for the origins allowed, HEAD for GET routes;
// - a body size limit (413), header size limit (431), JSON error bodies for every 4xx/5xx, exception-to-status
//   mapping so no handler fault reaches the process, and request/connection counts in Metrics.
//
// Handlers see cpp-httplib's Request and Response structs (the library's data types only; its server is not used):
// req.path, req.matches (the route regex's groups), headers, body, remote/local address; res.status, headers,
// set_content, and set_chunked_content_provider for Server-Sent Events (the provider runs on the handler thread,
// each write flushed at once; a failed write ends it).
//
// Threading: one event-loop thread (run()) and `threads` handler threads; a Server-Sent Events stream holds its
// handler thread for the stream's life, so size `threads` above the number of concurrent streams.
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
  int threads = 64;                     // handler threads
  size_t max_body_bytes = 1 << 20;      // larger bodies get 413
  size_t max_header_bytes = 16 << 10;   // larger request headers get 431
  int read_timeout_s = 10;              // deadline for a request's header (and, scaled, its body)
  int write_timeout_s = 30;             // a client that stops reading a response is dropped (its job cancelled)
  int keep_alive_timeout_s = 5;         // an idle keep-alive connection is closed after this
  int keep_alive_max_count = 100;       // requests per connection at most
  int max_connections = 2048;           // open connections in total at most
  int max_connections_per_client = 512; // open connections per remote address at most
  std::string api_token;                // non-empty: "Authorization: Bearer <token>" required
  std::vector<std::string> public_paths = {"/health"};  // exact paths that never need the token
  // Origins allowed to call the API from a browser ("*": any; empty: no CORS headers). The token is a header, never
  // a cookie, so a page on another origin still needs it.
  std::vector<std::string> cors_origins = {"*"};
};

class HttpServer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  HttpServer(HttpOptions options, Metrics& metrics);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // pattern: an ECMAScript regex for the whole path (groups land in req.matches); label: the route as it appears
  // in metrics ("/v1/jobs/{id}/stream"). Register every route before run().
  void get(const std::string& pattern, const std::string& label, Handler handler);
  void post(const std::string& pattern, const std::string& label, Handler handler);
  void del(const std::string& pattern, const std::string& label, Handler handler);

  // Binds the listening socket; throws Error(Io) naming host and port when it cannot.
  void bind();
  int port() const { return port_; }
  // Serves until stop(); call after bind(), typically on its own thread.
  void run();
  // Stops accepting, ends every connection (a stream in flight sees its next write fail, which cancels its job),
  // joins the handler threads and makes run() return; also when run() is called only after stop().
  void stop();

  const HttpOptions& options() const { return options_; }

  struct Route {
    std::string method;
    std::regex pattern;
    std::string label;
    Handler handler;
  };
  struct Impl;

 private:
  void add(const std::string& method, const std::string& pattern, const std::string& label, Handler handler);

  HttpOptions options_;
  Metrics& metrics_;
  std::vector<Route> routes_;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<bool> run_called_{false}, run_done_{false}, stop_requested_{false};
};

// Response helpers.
void send_json(httplib::Response& res, int status, const nlohmann::json& body);
void send_error(httplib::Response& res, const ApiError& error);
// Maps whatever a handler threw to the response: ApiError as is, rbee::Error by category, anything else 500.
void send_exception(httplib::Response& res, std::exception_ptr error);

// The token of an "Authorization: Bearer <token>" header value (scheme case-insensitive, RFC 7235), or false when
// the value is not of that form.
bool bearer_token(const std::string& header_value, std::string& token);

}  // namespace rbee::server
