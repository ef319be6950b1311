#include "server/worker_base.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "server/util.h"

namespace rbee::server {

void add_common_routes(HttpServer& http, Lifecycle& lifecycle, Metrics& metrics, DeviceStats* device) {
  metrics.describe_gauge("rbee_vram_used_bytes", "Device memory in use: on a GPU total - free (from the backend), on the CPU backend this process's resident set.");
  metrics.describe_gauge("rbee_vram_total_bytes", "Device memory in total.");
  metrics.describe_gauge("rbee_ready", "1 once the model is loaded and the worker accepts jobs.");
  metrics.describe_gauge("rbee_device_memory_used_bytes",
                         "Per device the model uses: memory in use (GPU: total - free; CPU: this process's resident set).");
  metrics.describe_gauge("rbee_device_memory_total_bytes", "Per device the model uses: memory in total.");
  metrics.describe_gauge("rbee_device_allocator_bytes",
                         "Per device the model uses: bytes rbee's caching allocator holds (in use + cached).");
  metrics.add_collector([device, &lifecycle](Metrics& m) {
    if (device) {
      const DeviceReport r = device->report();
      m.set("rbee_vram_used_bytes", (double)r.total.vram_used);
      m.set("rbee_vram_total_bytes", (double)r.total.vram_total);
      for (const DeviceSnapshot& d : r.devices) {
        const Labels labels = {{"device", d.id}, {"name", d.name}};
        m.set("rbee_device_memory_used_bytes", (double)d.vram_used, labels);
        m.set("rbee_device_memory_total_bytes", (double)d.vram_total, labels);
        m.set("rbee_device_allocator_bytes", (double)d.allocator_in_use, labels);
      }
    }
    m.set("rbee_ready", lifecycle.ready() ? 1.0 : 0.0);
  });
  http.get("/health", "/health", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"status", "healthy"}});
  });
  http.get("/ready", "/ready", [&lifecycle](const httplib::Request&, httplib::Response& res) {
    int status = 200;
    nlohmann::json body = lifecycle.ready_body(status);
    if (status != 200) res.set_header("Retry-After", "1");
    send_json(res, status, body);
  });
  http.get("/metrics", "/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

nlohmann::json heartbeat_body(const WorkerIdentity& id, const std::string& status, DeviceStats* device) {
  DeviceSnapshot s;
  nlohmann::json devices = nlohmann::json::array();
  if (device) {
    const DeviceReport r = device->report();
    s = r.total;
    for (const DeviceSnapshot& d : r.devices) {
      devices.push_back({{"id", d.id}, {"name", d.name}, {"vram_used", d.vram_used}, {"vram_total", d.vram_total}});
    }
  }
  return {{"worker",
           {{"id", id.worker_id},
            {"model_id", id.model_id},
            {"device", s.id},
            {"port", id.port},
            {"status", status},
            {"implementation", "rbee"},
            {"version", id.version},
            {"vram_used", s.vram_used},
            {"vram_total", s.vram_total},
            {"devices", devices}}},
          {"timestamp", iso8601_now()}};
}

void throw_not_ready(const Lifecycle& lifecycle) {
  if (lifecycle.state() == Lifecycle::State::Failed) throw ApiError(503, "load_failed", "the model failed to load");
  throw ApiError(503, "loading", "the model is still loading; see /ready", "", 1);
}

std::string backend_from_program_name(const char* argv0, std::string_view base) {
  const std::string name = std::filesystem::path(argv0).filename().string();
  for (const char* b : {"cpu", "cuda", "rocm"}) {
    if (name == std::string(base) + "-" + b) return b;
  }
  return "";
}

bool apply_program_backend(const std::string& fixed, bool given, std::string& backend, std::string_view program) {
  if (fixed.empty()) return true;
  if (given && backend != fixed) {
    std::fprintf(stderr, "%.*s-%s: --backend %s contradicts the program's name\n", (int)program.size(), program.data(),
                 fixed.c_str(), backend.c_str());
    return false;
  }
  backend = fixed;
  return true;
}

void api_token_from_env(HttpOptions& options) {
  if (const char* token = std::getenv("LLORCH_API_TOKEN"); token && *token) options.api_token = token;
}

std::unique_ptr<Heartbeat> start_heartbeat(const std::string& hive_url, double interval_s, Heartbeat::BodyFn body) {
  HeartbeatOptions hb;
  hb.hive_url = hive_url;
  hb.interval_s = interval_s;
  hb.max_backoff_s = 6 * interval_s;
  hb.initial_backoff_s = std::min(hb.initial_backoff_s, interval_s);
  auto out = std::make_unique<Heartbeat>(hb, std::move(body));
  out->start();
  return out;
}

nlohmann::json worker_info_common(const WorkerIdentity& id, const std::string& model_name,
                                  const std::string& model_path, const std::string& model_ref,
                                  const DeviceSnapshot& d) {
  return {
      {"worker_id", id.worker_id},
      {"implementation", "rbee"},
      {"version", id.version},
      {"model", model_name},
      {"model_path", model_path},
      {"model_ref", model_ref.empty() ? nlohmann::json(nullptr) : nlohmann::json(model_ref)},
      {"backend", d.backend},
      {"device",
       {{"id", d.id}, {"name", d.name}, {"vendor", d.vendor}, {"arch", d.arch}, {"vram_total", d.vram_total},
        {"vram_used", d.vram_used}}},
  };
}

}  // namespace rbee::server
