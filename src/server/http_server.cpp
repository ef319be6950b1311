#include "server/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "server/util.h"

namespace rbee::server {

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status();
  if (error.retry_after_s() > 0) res.set_header("Retry-After", std::to_string(error.retry_after_s()));
  if (error.status() == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(dump_json(error.body()), "application/json");
}

void send_exception(httplib::Response& res, std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    int status = 500;
    std::string code = "internal_error";
    switch (e.code()) {
      case ErrorCode::InvalidArgument: status = 400, code = "invalid_request"; break;
      case ErrorCode::NotFound: status = 404, code = "not_found"; break;
      case ErrorCode::Unsupported: status = 400, code = "unsupported"; break;
      case ErrorCode::OutOfMemory: status = 503, code = "out_of_memory"; break;
      default: break;
    }
    if (status >= 500) log::error("event=handler_error error=\"{}\"", e.what());
    send_error(res, ApiError(status, code, e.message(), "", status == 503 ? 1 : 0));
  } catch (const std::exception& e) {
    log::error("event=handler_error error=\"{}\"", e.what());
    send_error(res, ApiError(500, "internal_error", std::string("internal error: ") + e.what()));
  } catch (...) {
    log::error("event=handler_error error=unknown");
    send_error(res, ApiError(500, "internal_error", "internal error"));
  }
}

namespace {
// The body the library's own error responses get (it leaves them empty).
ApiError library_error(int status) {
  switch (status) {
    case 400: return ApiError(400, "bad_request", "the request could not be parsed as HTTP");
    case 404: return ApiError(404, "not_found", "no such route");
    case 413: return ApiError(413, "payload_too_large", "the request body exceeds the size limit");
    case 414: return ApiError(414, "uri_too_long", "the request URI is too long");
    default: return ApiError(status, "http_error", "HTTP error " + std::to_string(status));
  }
}
}  // namespace

HttpServer::HttpServer(HttpOptions options, Metrics& metrics) : options_(std::move(options)), metrics_(metrics) {
  metrics_.describe_counter("rbee_http_requests_total", "HTTP requests by route, method and status.");
  const int threads = std::max(4, options_.threads);
  server_.new_task_queue = [threads] { return new httplib::ThreadPool((size_t)threads); };
  server_.set_payload_max_length(options_.max_body_bytes);
  server_.set_read_timeout(options_.read_timeout_s, 0);
  server_.set_write_timeout(options_.write_timeout_s, 0);
  server_.set_keep_alive_timeout(options_.keep_alive_timeout_s);
  server_.set_keep_alive_max_count((size_t)options_.keep_alive_max_count);
  server_.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
  });
  server_.set_tcp_nodelay(true);

  server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_token.empty()) return httplib::Server::HandlerResponse::Unhandled;
    for (const auto& p : options_.public_paths) {
      if (req.path == p) return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string header = req.get_header_value("Authorization");
    const std::string expected = "Bearer " + options_.api_token;
    if (req.method == "GET" && req.has_param("token")) {
      for (const auto& p : options_.query_token_paths) {
        if (req.path == p && constant_time_equal(req.get_param_value("token"), options_.api_token)) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
      }
    }
    if (!constant_time_equal(header, expected)) {
      send_error(res, ApiError(401, "unauthorized",
                               header.empty() ? "missing 'Authorization: Bearer <token>' header"
                                              : "invalid bearer token"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Runs for every response with status >= 400; fills the body only where nobody wrote one.
  server_.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        send_error(res, library_error(res.status));
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    send_exception(res, ep);
  });
  server_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const std::string label = route_label(req);
    metrics_.add("rbee_http_requests_total", 1,
                 {{"route", label}, {"method", req.method}, {"status", std::to_string(res.status)}});
    log::debug("event=http method={} path={} route={} status={}", req.method, req.path, label, res.status);
  });
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::add(const std::string& method, const std::string& pattern, const std::string& label,
                     Handler handler) {
  routes_.push_back({method, std::regex(pattern), label});
  auto wrapped = [h = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    try {
      h(req, res);
    } catch (...) {
      send_exception(res, std::current_exception());
    }
  };
  if (method == "GET") server_.Get(pattern, wrapped);
  else if (method == "POST") server_.Post(pattern, wrapped);
  else server_.Delete(pattern, wrapped);
}

void HttpServer::get(const std::string& p, const std::string& l, Handler h) { add("GET", p, l, std::move(h)); }
void HttpServer::post(const std::string& p, const std::string& l, Handler h) { add("POST", p, l, std::move(h)); }
void HttpServer::del(const std::string& p, const std::string& l, Handler h) { add("DELETE", p, l, std::move(h)); }

std::string HttpServer::route_label(const httplib::Request& req) const {
  for (const auto& r : routes_) {
    if (std::regex_match(req.path, r.pattern)) return r.label;
  }
  return "unmatched";  // the path itself could be anything a client sends: never a label value
}

void HttpServer::bind() {
  if (options_.port == 0) {
    port_ = server_.bind_to_any_port(options_.host);
    RBEE_CHECK_CODE(port_ > 0, ErrorCode::Io, "cannot listen on {} (any port)", options_.host);
  } else {
    RBEE_CHECK_CODE(server_.bind_to_port(options_.host, options_.port), ErrorCode::Io,
                    "cannot listen on {}:{} (in use, or not an address of this host)", options_.host, options_.port);
    port_ = options_.port;
  }
}

void HttpServer::run() {
  // run_called_ before reading stop_requested_, and stop() the other way round (both sequentially consistent):
  // either run() sees the stop and returns, or stop() sees run() and waits until the loop can be stopped.
  run_called_ = true;
  if (!stop_requested_) server_.listen_after_bind();
  run_done_ = true;
}

void HttpServer::stop() {
  stop_requested_ = true;
  if (run_called_) {
    while (!server_.is_running() && !run_done_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (server_.is_running()) server_.stop();
}

}  // namespace rbee::server
