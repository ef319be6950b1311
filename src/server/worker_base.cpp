#include "server/worker_base.h"

#include "server/util.h"

namespace rbee::server {

void add_common_routes(HttpServer& http, Lifecycle& lifecycle, Metrics& metrics, DeviceStats* device) {
  metrics.describe_gauge("rbee_vram_used_bytes", "Device memory in use (total - free, from the backend).");
  metrics.describe_gauge("rbee_vram_total_bytes", "Device memory in total.");
  metrics.describe_gauge("rbee_ready", "1 once the model is loaded and the worker accepts jobs.");
  metrics.add_collector([device, &lifecycle](Metrics& m) {
    if (device) {
      const DeviceSnapshot s = device->snapshot();
      m.set("rbee_vram_used_bytes", (double)s.vram_used);
      m.set("rbee_vram_total_bytes", (double)s.vram_total);
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
  if (device) s = device->snapshot();
  return {{"worker",
           {{"id", id.worker_id},
            {"model_id", id.model_id},
            {"device", s.id},
            {"port", id.port},
            {"status", status},
            {"implementation", "rbee"},
            {"version", id.version},
            {"vram_used", s.vram_used},
            {"vram_total", s.vram_total}}},
          {"timestamp", iso8601_now()}};
}

}  // namespace rbee::server
