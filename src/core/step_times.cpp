// Host phase timer of generation steps (rbee/core/step_times.h).
#include "rbee/core/step_times.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "rbee/core/env.h"

namespace rbee::step_times {

namespace {

struct Row {
  std::string name;
  int64_t calls = 0;
  double seconds = 0;
};

std::mutex g_mutex;
std::vector<Row>& rows() {
  static std::vector<Row> r;  // few rows: a linear search keeps the first-recorded order
  return r;
}

}  // namespace

bool enabled() {
  static const bool on = env::flag_or("RBEE_STEP_TIMES", false);
  return on;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void add(const char* name, double seconds) {
  std::lock_guard lock(g_mutex);
  for (Row& r : rows()) {
    if (r.name == name) {
      r.calls += 1;
      r.seconds += seconds;
      return;
    }
  }
  rows().push_back({name, 1, seconds});
}

std::string report() {
  std::lock_guard lock(g_mutex);
  std::string out = "step times (RBEE_STEP_TIMES=1, host wall time, nothing synchronized for it):\n";
  for (const Row& r : rows()) {
    out += fmt::format("  {:<52} {:8d} calls {:10.2f} ms {:9.1f} us/call\n", r.name, r.calls, r.seconds * 1e3,
                       r.seconds * 1e6 / (double)std::max<int64_t>(r.calls, 1));
  }
  return out;
}

void reset() {
  std::lock_guard lock(g_mutex);
  rows().clear();
}

}  // namespace rbee::step_times
