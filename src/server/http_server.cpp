#include "server/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "server/http_wire.h"
#include "server/util.h"

namespace rbee::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// ---- response helpers --------------------------------------------------------------------------------------

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
  } catch (const std::bad_alloc&) {
    log::error("event=handler_error error=out_of_memory");
    send_error(res, ApiError(503, "out_of_memory", "the worker ran out of memory for this request", "", 1));
  } catch (const std::exception& e) {
    log::error("event=handler_error error=\"{}\"", e.what());
    send_error(res, ApiError(500, "internal_error", std::string("internal error: ") + e.what()));
  } catch (...) {
    log::error("event=handler_error error=unknown");
    send_error(res, ApiError(500, "internal_error", "internal error"));
  }
}

bool bearer_token(const std::string& value, std::string& token) {
  size_t i = 0;
  while (i < value.size() && value[i] == ' ') ++i;
  if (value.size() - i < 7 || strncasecmp(value.c_str() + i, "bearer ", 7) != 0) return false;
  i += 7;
  while (i < value.size() && value[i] == ' ') ++i;
  size_t end = value.size();
  while (end > i && (value[end - 1] == ' ' || value[end - 1] == '\t')) --end;
  token = value.substr(i, end - i);
  return !token.empty();
}

namespace {

// The body of the errors the server answers by itself.
ApiError library_error(int status) {
  switch (status) {
    case 400: return ApiError(400, "bad_request", "the request could not be parsed as HTTP");
    case 404: return ApiError(404, "not_found", "no such route");
    case 413: return ApiError(413, "payload_too_large", "the request body exceeds the size limit");
    case 431: return ApiError(431, "header_too_large", "the request header exceeds the size limit");
    case 503: return ApiError(503, "too_many_connections", "too many open connections from this client", "", 1);
    default: return ApiError(status, "http_error", "HTTP error " + std::to_string(status));
  }
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// A fixed set of threads running posted tasks in order.
class HandlerPool {
 public:
  void start(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
  }
  void post(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }
  // Runs what is queued, then joins.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void loop() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

// ---- the event loop and its connections ------------------------------------------------------------------------

struct Connection;

struct HttpServer::Impl {
  explicit Impl(HttpServer& s) : server(s), acceptor(io) {}
  HttpServer& server;
  std::atomic<bool> stopping{false};
  std::shared_ptr<std::atomic<int>> open_gauge = std::make_shared<std::atomic<int>>(0);  // read by /metrics

  std::mutex conn_mutex;  // guards the three below
  std::unordered_set<Connection*> connections;
  std::map<std::string, int> per_client;
  int open = 0;

  HandlerPool pool;
  // Declared last, destroyed first: destroying the loop destroys the handlers still queued on it, and with them
  // connections, whose destructors use the members above.
  asio::io_context io;
  tcp::acceptor acceptor;

  void accept();
  // What the server answers before a handler (auth, 404, 405, OPTIONS), or nullopt to run `route`.
  std::optional<httplib::Response> decide(httplib::Request& req, const Route*& route) const;
  void handle(const std::shared_ptr<Connection>& c);
  void count_drop(const char* reason) {
    server.metrics_.add("rbee_http_connections_dropped_total", 1, {{"reason", reason}});
  }
};

// One client connection. Between requests it belongs to the event loop (async reads under a deadline timer); once
// a request has fully arrived it belongs to one handler thread, which writes the response with blocking writes and
// then hands it back (keep-alive) or closes it. Never both at once.
struct Connection : std::enable_shared_from_this<Connection> {
  Connection(HttpServer::Impl& i, tcp::socket s, std::string client_addr)
      : impl(i), socket(std::move(s)), timer(impl.io), client(std::move(client_addr)) {}
  ~Connection() {
    std::lock_guard lock(impl.conn_mutex);
    impl.connections.erase(this);
    if (--impl.per_client[client] <= 0) impl.per_client.erase(client);
    --impl.open;
    --*impl.open_gauge;
  }

  HttpServer::Impl& impl;
  tcp::socket socket;
  asio::steady_timer timer;
  std::string client;
  beast::flat_buffer buffer;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser;
  bool timed_out = false;
  unsigned phase = 0;  // each arm() starts a phase; a timer that fires for an older phase does nothing
  int served = 0;

  // The request being served.
  httplib::Request req;
  const HttpServer::Route* route = nullptr;
  std::optional<httplib::Response> early;
  bool keep_alive = true;
  bool head_only = false;

  void arm(std::chrono::milliseconds limit) {
    timed_out = false;
    const unsigned mine = ++phase;
    timer.expires_after(limit);
    timer.async_wait([weak = weak_from_this(), mine](const beast::error_code& ec) {
      if (ec) return;
      if (auto self = weak.lock(); self && self->phase == mine) {
        self->timed_out = true;
        beast::error_code ignored;
        self->socket.cancel(ignored);
      }
    });
  }

  void disarm() {
    ++phase;
    timer.cancel();
  }

  void close() {
    disarm();
    beast::error_code ec;
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
  }

  // After an error answer with input possibly unread: stop sending, read and drop what the client still sends for
  // a moment, then close, so the kernel does not reset the connection before the client has read the answer.
  void linger_close() {
    beast::error_code ec;
    socket.shutdown(tcp::socket::shutdown_send, ec);
    arm(std::chrono::seconds(2));
    drain_some();
  }
  void drain_some() {
    auto sink = std::make_shared<std::array<char, 4096>>();
    socket.async_read_some(asio::buffer(*sink), [self = shared_from_this(), sink](const beast::error_code& ec, size_t) {
      if (ec) return self->close();
      self->drain_some();
    });
  }

  // Waits for the next request on the event loop.
  void start() {
    if (impl.stopping) return close();
    parser.emplace();
    parser->header_limit((std::uint32_t)impl.server.options().max_header_bytes);
    parser->body_limit(impl.server.options().max_body_bytes);
    if (served > 0 && buffer.size() == 0) {
      // Idle keep-alive: wait for the first byte of the next request; the header deadline starts then.
      arm(std::chrono::seconds(impl.server.options().keep_alive_timeout_s));
      socket.async_wait(tcp::socket::wait_read, [self = shared_from_this()](const beast::error_code& ec) {
        self->disarm();
        if (ec) {
          if (self->timed_out) self->impl.count_drop("idle");
          return self->close();
        }
        self->read_header();
      });
      return;
    }
    read_header();
  }

  void read_header() {
    arm(std::chrono::seconds(impl.server.options().read_timeout_s));
    bhttp::async_read_header(socket, buffer, *parser, [self = shared_from_this()](const beast::error_code& ec, size_t) {
      self->disarm();
      if (ec) return self->read_failed(ec, "header_timeout");
      self->on_header();
    });
  }

  void read_failed(const beast::error_code& ec, const char* timeout_reason) {
    if (timed_out) {
      impl.count_drop(timeout_reason);
      return close();
    }
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) {
      return close();
    }
    int status = 400;
    if (ec == bhttp::error::header_limit) status = 431;
    if (ec == bhttp::error::body_limit) status = 413;
    impl.count_drop(status == 400 ? "bad_request" : status == 413 ? "body_too_large" : "header_too_large");
    httplib::Response res;
    send_error(res, library_error(status));
    early = std::move(res);
    route = nullptr;
    keep_alive = false;
    if (req.method.empty()) req.method = "?";
    dispatch();
  }

  void on_header() {
    const auto& h = parser->get();
    req = httplib::Request();
    req.method = std::string(h.method_string());
    req.version = h.version() == 10 ? "HTTP/1.0" : "HTTP/1.1";
    req.target = std::string(h.target());
    const size_t q = req.target.find('?');
    req.path = wire::percent_decode(std::string_view(req.target).substr(0, q), false);
    if (q != std::string::npos) wire::parse_query(std::string_view(req.target).substr(q + 1), req.params);
    for (const auto& field : h) req.headers.emplace(std::string(field.name_string()), std::string(field.value()));
    beast::error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    if (!ec) req.remote_addr = remote.address().to_string(), req.remote_port = remote.port();
    const auto local = socket.local_endpoint(ec);
    if (!ec) req.local_addr = local.address().to_string(), req.local_port = local.port();
    keep_alive = h.keep_alive();
    head_only = req.method == "HEAD";
    early = impl.decide(req, route);

    const bool expect_continue = iequals(std::string(h[bhttp::field::expect]), "100-continue");
    if (parser->content_length() && *parser->content_length() > impl.server.options().max_body_bytes) {
      httplib::Response res;
      send_error(res, library_error(413));
      early = std::move(res);
      route = nullptr;
      keep_alive = false;  // the body is not read
      return dispatch();
    }
    if (parser->is_done()) return dispatch();
    if (early && expect_continue) {
      keep_alive = false;  // the client waits for 100 before sending its body; it gets the answer and a close
      return dispatch();
    }
    if (expect_continue) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(socket, asio::buffer(kContinue), [self = shared_from_this()](const beast::error_code& ec, size_t) {
        if (ec) return self->close();
        self->read_body();
      });
      return;
    }
    // Also for a refused request: its body is read (within the same limits) and dropped, so that the next request
    // on this connection starts where the client thinks it does.
    read_body();
  }

  void read_body() {
    const auto declared = parser->content_length().value_or(impl.server.options().max_body_bytes);
    arm(std::chrono::seconds(impl.server.options().read_timeout_s) + std::chrono::seconds(declared >> 18));
    bhttp::async_read(socket, buffer, *parser, [self = shared_from_this()](const beast::error_code& ec, size_t) {
      self->disarm();
      if (ec) return self->read_failed(ec, "body_timeout");
      self->dispatch();
    });
  }

  void dispatch() {
    if (parser && parser->is_done()) req.body = std::move(parser->get().body());
    ++served;
    if (served >= impl.server.options().keep_alive_max_count) keep_alive = false;
    impl.pool.post([self = shared_from_this()] { self->impl.handle(self); });
  }

  // Handler thread: where the connection goes after the response.
  void after_response(bool write_ok) {
    const bool reuse = write_ok && keep_alive && !impl.stopping;
    const bool error_close = write_ok && !keep_alive && early.has_value();
    req = httplib::Request();
    early.reset();
    route = nullptr;
    asio::post(impl.io, [self = shared_from_this(), reuse, error_close] {
      if (reuse) return self->start();
      if (error_close) return self->linger_close();
      self->close();
    });
  }
};

std::optional<httplib::Response> HttpServer::Impl::decide(httplib::Request& req, const Route*& route) const {
  const HttpOptions& o = server.options_;
  route = nullptr;
  std::vector<std::string> methods;  // of the routes whose pattern matches the path
  for (const auto& r : server.routes_) {
    std::smatch m;
    if (!std::regex_match(req.path, m, r.pattern)) continue;
    methods.push_back(r.method);
    if (!route && (r.method == req.method || (req.method == "HEAD" && r.method == "GET"))) {
      route = &r;
      std::regex_match(req.path, req.matches, r.pattern);
    }
  }
  if (std::find(methods.begin(), methods.end(), "GET") != methods.end()) methods.push_back("HEAD");
  methods.push_back("OPTIONS");
  const bool known = methods.size() > 1;

  // CORS preflight and OPTIONS: no token (browsers send none in a preflight).
  if (req.method == "OPTIONS") {
    httplib::Response res;
    if (!known) {
      send_error(res, library_error(404));
      return res;
    }
    res.status = 204;
    res.set_header("Allow", join(methods));
    if (!o.cors_origins.empty() && req.has_header("Origin")) {
      res.set_header("Access-Control-Allow-Methods", join(methods));
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
    }
    return res;
  }

  const bool is_public = std::find(o.public_paths.begin(), o.public_paths.end(), req.path) != o.public_paths.end();
  if (!o.api_token.empty() && !is_public) {
    const std::string header = req.get_header_value("Authorization");
    std::string token;
    const char* why = nullptr;
    if (header.empty()) why = "missing 'Authorization: Bearer <token>' header";
    else if (!bearer_token(header, token)) why = "the Authorization header is not of the form 'Bearer <token>'";
    else if (!constant_time_equal(token, o.api_token)) why = "invalid bearer token";
    if (why) {
      httplib::Response res;
      send_error(res, ApiError(401, "unauthorized", why));
      route = nullptr;
      return res;
    }
  }
  if (route) return std::nullopt;
  httplib::Response res;
  if (!known) {
    send_error(res, library_error(404));
  } else {
    methods.pop_back();  // OPTIONS is always there; Allow lists it too
    methods.push_back("OPTIONS");
    send_error(res, ApiError(405, "method_not_allowed",
                             req.method + " is not allowed on " + req.path + " (allowed: " + join(methods) + ")"));
    res.set_header("Allow", join(methods));
  }
  return res;
}

void HttpServer::Impl::handle(const std::shared_ptr<Connection>& c) {
  const HttpOptions& o = server.options_;
  httplib::Request& req = c->req;
  httplib::Response res;
  std::string label = "unmatched";
  if (c->early) {
    res = std::move(*c->early);
    c->early.emplace();  // still "early": the connection may need a lingering close
  } else if (c->route) {
    label = c->route->label;
    try {
      c->route->handler(req, res);
    } catch (...) {
      send_exception(res, std::current_exception());
    }
    if (res.status < 0) res.status = 200;
  }
  if (c->route) label = c->route->label;
  if (res.status >= 400 && res.body.empty() && !res.content_provider_) send_error(res, library_error(res.status));
  if (!o.cors_origins.empty() && req.has_header("Origin")) {
    const std::string origin = req.get_header_value("Origin");
    const bool any = std::find(o.cors_origins.begin(), o.cors_origins.end(), "*") != o.cors_origins.end();
    if (any) res.set_header("Access-Control-Allow-Origin", "*");
    else if (std::find(o.cors_origins.begin(), o.cors_origins.end(), origin) != o.cors_origins.end()) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
    }
  }
  server.metrics_.add("rbee_http_requests_total", 1,
                      {{"route", label}, {"method", req.method}, {"status", std::to_string(res.status)}});
  log::debug("event=http method={} path={} route={} status={}", req.method, req.path, label, res.status);

  const int fd = c->socket.native_handle();
  const auto stall = std::chrono::seconds(o.write_timeout_s);
  bool ok = true;
  if (res.content_provider_ && !c->head_only) {
    ok = wire::write_all(fd, wire::response_head(res, 0, true, c->keep_alive), stall);
    bool finished = false;
    size_t offset = 0;
    httplib::DataSink sink;
    sink.write = [&](const char* data, size_t size) {
      if (!ok || size == 0) return ok;
      ok = !stopping && wire::write_all(fd, wire::chunk_frame(data, size), stall);
      offset += size;
      return ok;
    };
    sink.done = [&] {
      if (finished) return;
      finished = true;
      if (ok) ok = wire::write_all(fd, wire::kLastChunk, stall);
    };
    sink.is_writable = [&] { return ok && !stopping; };
    while (ok && !finished) {
      if (!res.content_provider_(offset, 0, sink)) ok = false;
    }
    res.content_provider_success_ = ok && finished;
  } else {
    const std::string head = wire::response_head(res, res.body.size(), false, c->keep_alive);
    ok = c->head_only ? wire::write_all(fd, head, stall) : wire::write_all(fd, head + res.body, stall);
    res.content_provider_success_ = false;  // a provider of a HEAD answer never ran
  }
  c->after_response(ok);
}

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](const beast::error_code& ec, tcp::socket socket) {
    if (ec) {
      if (!stopping && acceptor.is_open()) accept();  // e.g. EMFILE: keep serving the connections we have
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    const auto remote = socket.remote_endpoint(ignored);
    const std::string client = ignored ? "?" : remote.address().to_string();
    const HttpOptions& o = server.options_;
    bool refuse = false;
    {
      std::lock_guard lock(conn_mutex);
      if (open >= o.max_connections || per_client[client] >= o.max_connections_per_client) {
        refuse = true;
        if (per_client[client] == 0) per_client.erase(client);
      } else {
        ++open;
        ++*open_gauge;
        ++per_client[client];
      }
    }
    if (refuse) {
      count_drop("connection_cap");
      httplib::Response res;
      send_error(res, library_error(503));
      const std::string out = wire::response_head(res, res.body.size(), false, false) + res.body;
      (void)::send(socket.native_handle(), out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      socket.close(ignored);
    } else {
      auto c = std::make_shared<Connection>(*this, std::move(socket), client);
      {
        std::lock_guard lock(conn_mutex);
        connections.insert(c.get());
      }
      c->start();
    }
    if (!stopping) accept();
  });
}

// ---- HttpServer --------------------------------------------------------------------------------------------------

HttpServer::HttpServer(HttpOptions options, Metrics& metrics)
    : options_(std::move(options)), metrics_(metrics), impl_(std::make_unique<Impl>(*this)) {
  metrics_.describe_counter("rbee_http_requests_total", "HTTP requests by route, method and status.");
  metrics_.describe_counter("rbee_http_connections_dropped_total",
                            "Connections the server closed on its own, by reason (header_timeout, body_timeout, "
                            "idle, connection_cap, bad_request, body_too_large, header_too_large).");
  metrics_.describe_gauge("rbee_http_connections", "Open HTTP connections.");
  metrics_.add_collector([open = impl_->open_gauge](Metrics& m) { m.set("rbee_http_connections", open->load()); });
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::add(const std::string& method, const std::string& pattern, const std::string& label,
                     Handler handler) {
  routes_.push_back({method, std::regex(pattern), label, std::move(handler)});
}

void HttpServer::get(const std::string& p, const std::string& l, Handler h) { add("GET", p, l, std::move(h)); }
void HttpServer::post(const std::string& p, const std::string& l, Handler h) { add("POST", p, l, std::move(h)); }
void HttpServer::del(const std::string& p, const std::string& l, Handler h) { add("DELETE", p, l, std::move(h)); }

void HttpServer::bind() {
  // Every connection is a descriptor: allow as many as the hard limit permits (the caps above stay the bound).
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  beast::error_code ec;
  const auto address = asio::ip::make_address(options_.host == "localhost" ? "127.0.0.1" : options_.host, ec);
  RBEE_CHECK_CODE(!ec, ErrorCode::Io, "cannot listen on {}:{} (not an IP address: {})", options_.host, options_.port,
                  ec.message());
  tcp::acceptor& a = impl_->acceptor;
  const tcp::endpoint endpoint(address, (unsigned short)options_.port);
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  RBEE_CHECK_CODE(!ec, ErrorCode::Io, "cannot listen on {}:{} (in use, or not an address of this host: {})",
                  options_.host, options_.port, ec.message());
  port_ = a.local_endpoint().port();
}

void HttpServer::run() {
  // run_called_ before reading stop_requested_, and stop() the other way round (both sequentially consistent):
  // either run() sees the stop and returns, or stop() sees run() and waits for it.
  run_called_ = true;
  if (!stop_requested_) {
    impl_->pool.start(std::max(4, options_.threads));
    impl_->accept();
    auto guard = asio::make_work_guard(impl_->io);
    impl_->io.run();
    impl_->pool.stop();
  }
  run_done_ = true;
}

void HttpServer::stop() {
  if (stop_requested_.exchange(true)) {
    while (run_called_ && !run_done_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  if (!run_called_) return;
  impl_->stopping = true;
  asio::post(impl_->io, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
    // Every socket, whoever owns it now: reads on the loop fail at once, a handler's next write fails.
    std::lock_guard lock(impl_->conn_mutex);
    for (Connection* c : impl_->connections) ::shutdown(c->socket.native_handle(), SHUT_RDWR);
  });
  // Handler threads finish (their writes fail), hand their connections back, and the loop closes them.
  while (!run_done_) {
    {
      std::lock_guard lock(impl_->conn_mutex);
      if (impl_->open == 0) impl_->io.stop();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace rbee::server
