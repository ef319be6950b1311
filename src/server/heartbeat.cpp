#include "server/heartbeat.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>

#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "server/api_error.h"

namespace rbee::server {

std::pair<std::string, std::string> split_base_url(const std::string& url) {
  const size_t scheme_end = url.find("://");
  RBEE_CHECK(scheme_end != std::string::npos, "--hive-url '{}' must start with http:// or https://", url);
  const std::string scheme = url.substr(0, scheme_end);
  RBEE_CHECK(scheme == "http" || scheme == "https", "--hive-url '{}': unsupported scheme '{}'", url, scheme);
  const size_t host_start = scheme_end + 3;
  const size_t path_start = url.find('/', host_start);
  const std::string host = url.substr(host_start, path_start == std::string::npos ? std::string::npos
                                                                                  : path_start - host_start);
  RBEE_CHECK(!host.empty(), "--hive-url '{}' has no host", url);
  std::string path = path_start == std::string::npos ? "" : url.substr(path_start);
  while (!path.empty() && path.back() == '/') path.pop_back();
  return {scheme + "://" + host, path};
}

Heartbeat::Heartbeat(HeartbeatOptions options, BodyFn body) : options_(std::move(options)), body_(std::move(body)) {
  auto [base, path] = split_base_url(options_.hive_url);
  base_ = base;
  path_ = path + "/v1/worker-heartbeat";
}

Heartbeat::~Heartbeat() { stop(); }

void Heartbeat::start() {
  std::lock_guard lock(mutex_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

void Heartbeat::stop(const nlohmann::json* final_body) {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (final_body) send(*final_body);
}

bool Heartbeat::send(const nlohmann::json& body) {
  httplib::Client client(base_);
  const auto timeout_us = (long)(options_.timeout_s * 1e6);
  client.set_connection_timeout(timeout_us / 1000000, timeout_us % 1000000);
  client.set_read_timeout(timeout_us / 1000000, timeout_us % 1000000);
  client.set_write_timeout(timeout_us / 1000000, timeout_us % 1000000);
  auto res = client.Post(path_, dump_json(body), "application/json");
  if (res && res->status >= 200 && res->status < 300) {
    sent_++;
    return true;
  }
  failures_++;
  return false;
}

void Heartbeat::loop() {
  int failures_in_a_row = 0;
  while (true) {
    nlohmann::json body;
    try {
      body = body_();
    } catch (const std::exception& e) {
      log::warn("event=heartbeat_body_error error=\"{}\"", e.what());
    }
    bool ok = false;
    if (!body.is_null()) ok = send(body);
    double wait_s = options_.interval_s;
    if (ok) {
      if (failures_in_a_row > 0) log::info("event=heartbeat_recovered hive={} after_failures={}", base_, failures_in_a_row);
      failures_in_a_row = 0;
    } else {
      if (failures_in_a_row == 0) log::warn("event=heartbeat_failed hive={}{} (will retry with backoff)", base_, path_);
      ++failures_in_a_row;
      wait_s = std::min(options_.max_backoff_s,
                        options_.initial_backoff_s * std::pow(2.0, std::min(failures_in_a_row - 1, 20)));
    }
    std::unique_lock lock(mutex_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(wait_s), [&] { return stopping_; })) return;
  }
}

}  // namespace rbee::server
