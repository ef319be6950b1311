// Metrics: counters, gauges and histograms rendered in the Prometheus text exposition format (version 0.0.4).
// Thread-safe; every series is created on first use. Names and help texts are declared once with describe_*.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace rbee::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  void describe_counter(const std::string& name, const std::string& help);
  void describe_gauge(const std::string& name, const std::string& help);
  // buckets: upper bounds, ascending; +Inf is added.
  void describe_histogram(const std::string& name, const std::string& help, std::vector<double> buckets);

  // Throws Error(Internal) for a name that was not described with the matching type.
  void add(const std::string& name, double value = 1.0, const Labels& labels = {});
  void set(const std::string& name, double value, const Labels& labels = {});
  void observe(const std::string& name, double value, const Labels& labels = {});

  // Called at the start of every render() (outside the lock) to refresh gauges such as queue depth and VRAM.
  void add_collector(std::function<void(Metrics&)> collector);

  // The exposition text: families in name order, "# HELP", "# TYPE", then one line per series.
  std::string render();

  // Current value of a counter or gauge series (0 when absent); for tests and /info.
  double value(const std::string& name, const Labels& labels = {}) const;

 private:
  enum class Type { Counter, Gauge, Histogram };
  struct Series {
    double value = 0;                  // counter, gauge
    std::vector<uint64_t> bucket_hits; // histogram: per bucket (not cumulative)
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> buckets;
    std::map<std::string, Series> series;  // key: rendered label set "{a="x",b="y"}" or ""
  };
  Family& family(const std::string& name, Type type);
  void describe(const std::string& name, Type type, const std::string& help, std::vector<double> buckets);

  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
  std::vector<std::function<void(Metrics&)>> collectors_;
};

// {a="x",b="y"} with \, " and newline escaped as the format requires; "" for no labels.
std::string render_labels(const Labels& labels);

}  // namespace rbee::server
