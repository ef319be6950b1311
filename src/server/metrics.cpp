#include "server/metrics.h"

#include <cmath>

#include <fmt/format.h>

#include "rbee/core/error.h"

namespace rbee::server {

std::string render_labels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += labels[i].first;
    out += "=\"";
    for (char c : labels[i].second) {
      if (c == '\\') out += "\\\\";
      else if (c == '"') out += "\\\"";
      else if (c == '\n') out += "\\n";
      else out += c;
    }
    out += '"';
  }
  return out + "}";
}

namespace {
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}
// Adds one label to a rendered label set: {a="x"} + le="0.1" -> {a="x",le="0.1"}.
std::string with_label(const std::string& key, const std::string& extra) {
  if (key.empty()) return "{" + extra + "}";
  return key.substr(0, key.size() - 1) + "," + extra + "}";
}
}  // namespace

void Metrics::describe(const std::string& name, Type type, const std::string& help, std::vector<double> buckets) {
  std::lock_guard lock(mutex_);
  Family& f = families_[name];
  f.type = type;
  f.help = help;
  f.buckets = std::move(buckets);
}

void Metrics::describe_counter(const std::string& name, const std::string& help) {
  describe(name, Type::Counter, help, {});
}
void Metrics::describe_gauge(const std::string& name, const std::string& help) { describe(name, Type::Gauge, help, {}); }
void Metrics::describe_histogram(const std::string& name, const std::string& help, std::vector<double> buckets) {
  describe(name, Type::Histogram, help, std::move(buckets));
}

Metrics::Family& Metrics::family(const std::string& name, Type type) {
  auto it = families_.find(name);
  RBEE_ASSERT(it != families_.end() && it->second.type == type, "metric '{}' used before being described", name);
  return it->second;
}

void Metrics::add(const std::string& name, double value, const Labels& labels) {
  std::lock_guard lock(mutex_);
  family(name, Type::Counter).series[render_labels(labels)].value += value;
}

void Metrics::set(const std::string& name, double value, const Labels& labels) {
  std::lock_guard lock(mutex_);
  family(name, Type::Gauge).series[render_labels(labels)].value = value;
}

void Metrics::observe(const std::string& name, double value, const Labels& labels) {
  std::lock_guard lock(mutex_);
  Family& f = family(name, Type::Histogram);
  Series& s = f.series[render_labels(labels)];
  if (s.bucket_hits.empty()) s.bucket_hits.assign(f.buckets.size() + 1, 0);
  size_t b = 0;
  while (b < f.buckets.size() && value > f.buckets[b]) ++b;
  s.bucket_hits[b]++;
  s.sum += value;
  s.count++;
}

void Metrics::add_collector(std::function<void(Metrics&)> collector) {
  std::lock_guard lock(mutex_);
  collectors_.push_back(std::move(collector));
}

double Metrics::value(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mutex_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.series.find(render_labels(labels));
  return s == it->second.series.end() ? 0 : s->second.value;
}

std::string Metrics::render() {
  std::vector<std::function<void(Metrics&)>> collectors;
  {
    std::lock_guard lock(mutex_);
    collectors = collectors_;
  }
  for (auto& c : collectors) c(*this);
  std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& entry : families_) {
    // Plain references, not structured bindings: the lambda below captures them (clang 14 refuses bindings).
    const auto& name = entry.first;
    const auto& f = entry.second;
    const char* type = f.type == Type::Counter ? "counter" : f.type == Type::Gauge ? "gauge" : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, type);
    if (f.type != Type::Histogram) {
      // A counter without labels is shown as 0 before its first increment, so scrapers see it exists.
      if (f.series.empty()) out += fmt::format("{} 0\n", name);
      for (const auto& [key, s] : f.series) out += fmt::format("{}{} {}\n", name, key, number(s.value));
      continue;
    }
    auto emit = [&](const std::string& key, const Series* s) {
      uint64_t cumulative = 0;
      for (size_t b = 0; b <= f.buckets.size(); ++b) {
        cumulative += s ? s->bucket_hits[b] : 0;
        const std::string le = b < f.buckets.size() ? number(f.buckets[b]) : "+Inf";
        out += fmt::format("{}_bucket{} {}\n", name, with_label(key, "le=\"" + le + "\""), cumulative);
      }
      out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, key, number(s ? s->sum : 0), name, key,
                         s ? s->count : 0);
    };
    if (f.series.empty()) emit("", nullptr);
    for (const auto& [key, s] : f.series) emit(key, &s);
  }
  return out;
}

}  // namespace rbee::server
