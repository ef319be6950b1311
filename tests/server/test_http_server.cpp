// HttpServer at the byte level (issue 13): pipelined requests, chunked request bodies, Expect: 100-continue, HEAD,
// 413 / 431, a refused body drained, header deadlines, and stop() with a stream in flight. Real sockets on
// loopback against a server with short deadlines; the API tests (tests/api/test_http_abuse.py) check the worker.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "server/channel.h"
#include "server/event_stream.h"
#include "server/http_server.h"
#include "server/http_wire.h"

namespace rbee::server {
namespace {

class Served {
 public:
  explicit Served(HttpOptions o = {}) : opt_(fix(std::move(o))), http_(opt_, metrics_) {
    http_.get("/health", "/health", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"status", "healthy"}});
    });
    http_.post("/echo", "/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.status = 200;
      res.set_content(req.body, "text/plain");
    });
    http_.get("/stream", "/stream", [this](const httplib::Request&, httplib::Response& res) {
      auto ch = channel_;
      stream_events<int>(res, ch, *ch, [](const int& i) { return sse_data({{"i", i}}); },
                         [this](bool completed) { stream_completed_ = completed ? 1 : 0; });
    });
    http_.bind();
    thread_ = std::thread([this] { http_.run(); });
  }
  ~Served() {
    http_.stop();
    thread_.join();
  }
  int port() const { return http_.port(); }
  HttpServer& http() { return http_; }
  Metrics& metrics() { return metrics_; }
  std::shared_ptr<Channel<int>> channel_ = std::make_shared<Channel<int>>();
  std::atomic<int> stream_completed_{-1};

 private:
  static HttpOptions fix(HttpOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    o.threads = 4;
    return o;
  }
  HttpOptions opt_;
  Metrics metrics_;
  HttpServer http_;
  std::thread thread_;
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

void send_all(int fd, const std::string& s) { ASSERT_TRUE(wire::write_all(fd, s, std::chrono::seconds(5))); }

// Reads until `n` complete responses with Content-Length bodies are in (or the peer closes / 5 s pass).
std::string read_responses(int fd, int n, bool* closed = nullptr) {
  std::string data;
  int complete = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (complete < n && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t got = ::recv(fd, buf, sizeof buf, 0);
    if (got <= 0) {
      if (closed) *closed = true;
      break;
    }
    data.append(buf, (size_t)got);
    complete = 0;
    size_t pos = 0;
    while (true) {
      const size_t head_end = data.find("\r\n\r\n", pos);
      if (head_end == std::string::npos) break;
      const size_t cl = data.find("Content-Length: ", pos);
      size_t len = 0;
      if (cl != std::string::npos && cl < head_end) len = std::stoul(data.substr(cl + 16));
      if (data.size() < head_end + 4 + len) break;
      pos = head_end + 4 + len;
      ++complete;
    }
  }
  return data;
}

int count(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

TEST(HttpServer, PipelinedRequestsAnsweredInOrder) {
  Served s;
  const int fd = connect_to(s.port());
  send_all(fd, "GET /health HTTP/1.1\r\nHost: t\r\n\r\nPOST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
               "GET /health HTTP/1.1\r\nHost: t\r\n\r\n");
  const std::string out = read_responses(fd, 3);
  EXPECT_EQ(count(out, "HTTP/1.1 200 OK"), 3) << out;
  EXPECT_LT(out.find("healthy"), out.find("hello"));
  ::close(fd);
}

TEST(HttpServer, ChunkedRequestBodyAndExpectContinue) {
  Served s;
  const int fd = connect_to(s.port());
  send_all(fd, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  std::string out = read_responses(fd, 1);
  EXPECT_NE(out.find("\r\n\r\nabcde"), std::string::npos) << out;
  send_all(fd, "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  out = read_responses(fd, 1);  // the interim answer has no body
  EXPECT_EQ(out.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << out;
  send_all(fd, "xyz");
  out = read_responses(fd, 1);
  EXPECT_NE(out.find("\r\n\r\nxyz"), std::string::npos) << out;
  ::close(fd);
}

TEST(HttpServer, RefusedBodyIsDrainedAndTheConnectionStaysInStep) {
  HttpOptions o;
  o.api_token = "secret";
  Served s(o);
  const int fd = connect_to(s.port());
  const std::string body = "GET /health HTTP/1.1\r\nHost: smuggled\r\n\r\n";
  std::string req;
  for (int i = 0; i < 5; ++i) {
    req += "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  req += "POST /echo HTTP/1.1\r\nHost: t\r\nauthorization: bearer secret\r\nContent-Length: 2\r\n\r\nok";
  send_all(fd, req);
  const std::string out = read_responses(fd, 6);
  EXPECT_EQ(count(out, "HTTP/1.1 401 "), 5) << out;
  EXPECT_EQ(count(out, "HTTP/1.1 200 "), 1) << out;
  EXPECT_EQ(count(out, "healthy"), 0) << "a refused body was run as a request:\n" << out;
  EXPECT_NE(out.find("\r\n\r\nok"), std::string::npos);
  ::close(fd);
}

TEST(HttpServer, LimitsAnd405AndHead) {
  HttpOptions o;
  o.max_body_bytes = 100;
  o.max_header_bytes = 1024;
  Served s(o);
  int fd = connect_to(s.port());
  send_all(fd, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 101\r\n\r\n");
  bool closed = false;
  std::string out = read_responses(fd, 1, &closed);
  EXPECT_EQ(out.rfind("HTTP/1.1 413 ", 0), 0u) << out;
  ::close(fd);
  fd = connect_to(s.port());
  send_all(fd, "GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n");
  out = read_responses(fd, 1);
  EXPECT_EQ(out.rfind("HTTP/1.1 431 ", 0), 0u) << out;
  ::close(fd);
  fd = connect_to(s.port());
  send_all(fd, "DELETE /health HTTP/1.1\r\nHost: t\r\n\r\nHEAD /health HTTP/1.1\r\nHost: t\r\n\r\n");
  out = read_responses(fd, 1);
  EXPECT_EQ(out.rfind("HTTP/1.1 405 ", 0), 0u) << out;
  EXPECT_NE(out.find("Allow: GET, HEAD, OPTIONS\r\n"), std::string::npos) << out;
  ::close(fd);
}

TEST(HttpServer, HeaderDeadlineDropsASlowClient) {
  HttpOptions o;
  o.read_timeout_s = 1;
  Served s(o);
  const int fd = connect_to(s.port());
  const auto t0 = std::chrono::steady_clock::now();
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {  // one byte every 100 ms: each read resets no timer
    if (::send(fd, "G", 1, MSG_NOSIGNAL) != 1) closed = true;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char c;
      if (::recv(fd, &c, 1, 0) <= 0) closed = true;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(closed);
  EXPECT_LT(secs, 2.5);
  EXPECT_GE(s.metrics().value("rbee_http_connections_dropped_total", {{"reason", "header_timeout"}}), 1.0);
  ::close(fd);
}

TEST(HttpServer, StopEndsAStreamInFlight) {
  auto s = std::make_unique<Served>();
  const int fd = connect_to(s->port());
  send_all(fd, "GET /stream HTTP/1.1\r\nHost: t\r\n\r\n");
  s->channel_->push(1);
  std::string got;
  for (int i = 0; i < 50 && got.find("\"i\":1") == std::string::npos; ++i) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char buf[1024];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) got.append(buf, (size_t)n);
    }
  }
  EXPECT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos) << got;
  EXPECT_NE(got.find("\"i\":1"), std::string::npos) << got;
  const auto t0 = std::chrono::steady_clock::now();
  s.reset();  // stop(): the stream's next write fails (a job's stream would cancel its job)
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  ::close(fd);
}

}  // namespace
}  // namespace rbee::server
