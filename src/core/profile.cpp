// Wall-time profiler of ops and layers (rbee/core/profile.h).
#include "rbee/core/profile.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "rbee/core/device.h"
#include "rbee/core/env.h"

namespace rbee::profile {

namespace {

struct Row {
  int64_t calls = 0;
  double seconds = 0;
};

std::mutex g_mutex;
std::map<std::string, Row>& table() {
  static std::map<std::string, Row> t;
  return t;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

bool enabled() {
  static const bool on = env::flag_or("RBEE_OP_PROFILE", false);
  return on;
}

Scope::Scope(const char* kind, const Tensor& x, const Shape& detail) {
  if (!enabled()) return;
  device_ = &x.device();
  key_ = fmt::format("{:<10} {} {}{}", kind, dtype_name(x.dtype()), x.shape().to_string(),
                     detail.rank() == 0 ? "" : " w" + detail.to_string());
  device_->synchronize();
  t0_ = now_s();
}

Scope::~Scope() {
  if (!device_) return;
  device_->synchronize();
  const double dt = now_s() - t0_;
  std::lock_guard<std::mutex> lock(g_mutex);
  Row& r = table()[key_];
  r.calls += 1;
  r.seconds += dt;
}

std::string report() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::pair<std::string, Row>> rows(table().begin(), table().end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double sum = 0;
  std::map<std::string, double> by_kind;
  for (const auto& [k, r] : rows) {
    sum += r.seconds;
    by_kind[k.substr(0, k.find(' '))] += r.seconds;
  }
  std::string out = fmt::format("profile: {:.3f} s in profiled layers\n", sum);
  for (const auto& [kind, s] : by_kind)
    out += fmt::format("  kind {:<10} {:9.2f} ms {:5.1f}%\n", kind, s * 1e3, sum > 0 ? 100 * s / sum : 0.0);
  for (const auto& [k, r] : rows)
    out += fmt::format("  {:<70} {:6d} calls {:9.2f} ms {:8.3f} ms/call {:5.1f}%\n", k, r.calls, r.seconds * 1e3,
                       r.seconds * 1e3 / (double)r.calls, sum > 0 ? 100 * r.seconds / sum : 0.0);
  return out;
}

void reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  table().clear();
}

}  // namespace rbee::profile
