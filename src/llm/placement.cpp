#include "rbee/llm/placement.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "rbee/backend/device.h"
#include "rbee/core/env.h"
#include "rbee/core/error.h"
#include "rbee/llm/model_config.h"

namespace rbee::llm {

std::string_view split_mode_name(SplitMode mode) { return mode == SplitMode::Tensor ? "tensor" : "layer"; }

bool Placement::splits_head() const {
  static const bool on = env::flag_or("RBEE_TP_SPLIT_HEAD", true);
  return on && split == SplitMode::Tensor && ranks() > 1;
}

std::pair<int64_t, int64_t> Placement::head_rows(int r, int64_t vocab) const {
  if (!splits_head()) return holds_head(r) ? std::pair<int64_t, int64_t>{0, vocab} : std::pair<int64_t, int64_t>{0, 0};
  const int64_t n = ranks(), base = vocab / n, extra = vocab % n;
  return {r * base + std::min<int64_t>(r, extra), base + (r < extra ? 1 : 0)};
}

void Placement::validate(const ModelConfig& c) const {
  RBEE_CHECK(!devices.empty(), "placement: no devices");
  for (size_t i = 0; i < devices.size(); ++i) {
    RBEE_CHECK(devices[i] != nullptr, "placement: device {} is null", i);
    for (size_t j = 0; j < i; ++j) {
      RBEE_CHECK(devices[i] != devices[j], "placement: device {} is named twice", devices[i]->id());
    }
  }
  if (split == SplitMode::Layer) {
    RBEE_CHECK(layer_begin.size() == devices.size() + 1 && layer_begin.front() == 0 &&
                   layer_begin.back() == c.n_layers,
               "placement: layer bounds must run from 0 to {} over {} devices", c.n_layers, devices.size());
    for (size_t s = 0; s + 1 < layer_begin.size(); ++s) {
      RBEE_CHECK(layer_begin[s] < layer_begin[s + 1], "placement: stage {} ({}) gets no layers", s,
                 devices[s]->id());
    }
    return;
  }
  RBEE_CHECK(q_heads.size() == devices.size() && ffn.size() == devices.size(),
             "placement: tensor split needs query heads and MLP columns for each of {} devices", devices.size());
  RBEE_CHECK(std::accumulate(q_heads.begin(), q_heads.end(), 0) == c.n_heads,
             "placement: query heads per rank must add up to {}", c.n_heads);
  RBEE_CHECK(std::accumulate(ffn.begin(), ffn.end(), 0) == c.intermediate_size,
             "placement: MLP columns per rank must add up to {}", c.intermediate_size);
  const int group = c.n_heads / c.n_kv_heads;
  int q0 = 0;
  for (size_t r = 0; r < devices.size(); ++r) {
    RBEE_CHECK(q_heads[r] > 0 && ffn[r] > 0, "placement: rank {} ({}) gets {} query heads and {} MLP columns", r,
               devices[r]->id(), q_heads[r], ffn[r]);
    // Whole kv-head groups, or a part of one group.
    const bool whole_groups = q0 % group == 0 && q_heads[r] % group == 0;
    const bool within_one = q0 / group == (q0 + q_heads[r] - 1) / group;
    RBEE_CHECK(whole_groups || within_one,
               "placement: rank {} ({}) gets query heads {}-{}, which cut across the groups of {} heads that share a "
               "kv head", r, devices[r]->id(), q0, q0 + q_heads[r] - 1, group);
    q0 += q_heads[r];
  }
}

std::string Placement::describe() const {
  std::string out;
  for (size_t r = 0; r < devices.size(); ++r) {
    if (!out.empty()) out += ", ";
    if (split == SplitMode::Layer) {
      out += fmt::format("layers {}-{} on {}", layer_begin[r], layer_begin[r + 1] - 1, devices[r]->id());
    } else {
      out += fmt::format("{} ({} q heads, {} MLP columns)", devices[r]->id(), q_heads[r], ffn[r]);
    }
  }
  return split == SplitMode::Tensor ? "tensor split over " + out : out;
}

Placement single_device(Device& device, const ModelConfig& config) {
  Placement p;
  p.devices = {&device};
  p.layer_begin = {0, config.n_layers};
  return p;
}

std::vector<Device*> parse_device_list(std::string_view list) {
  Registry& registry = Registry::global();
  registry.load_plugins();
  std::vector<Device*> out;
  std::string_view rest = list;
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    RBEE_CHECK(!item.empty(), "--devices '{}': an empty entry (expected e.g. cuda:0,cuda:1)", list);
    const size_t colon = item.find(':');
    const std::string_view backend = item.substr(0, colon);
    int index = 0;
    if (colon != std::string_view::npos) {
      const std::string_view num = item.substr(colon + 1);
      const auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
      RBEE_CHECK(ec == std::errc() && ptr == num.data() + num.size() && index >= 0,
                 "--devices '{}': '{}' is not BACKEND or BACKEND:INDEX", list, item);
    }
    RBEE_CHECK(backend == "cpu" || backend == "cuda" || backend == "rocm",
               "--devices '{}': unknown backend '{}' in '{}' (cpu, cuda, rocm)", list, backend, item);
    Device& d = registry.select(backend, index);
    RBEE_CHECK(std::find(out.begin(), out.end(), &d) == out.end(), "--devices '{}': {} is named twice", list,
               d.id());
    out.push_back(&d);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

std::vector<double> parse_split_ratio(std::string_view text) {
  std::vector<double> out;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string item(rest.substr(0, comma));
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    RBEE_CHECK(!item.empty() && end == item.c_str() + item.size() && std::isfinite(v) && v >= 0,
               "--split-ratio '{}': '{}' is not a non-negative number", text, item);
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  RBEE_CHECK(std::any_of(out.begin(), out.end(), [](double v) { return v > 0; }),
             "--split-ratio '{}': at least one share must be positive", text);
  return out;
}

std::vector<int> proportional_split(int total, const std::vector<double>& weights, int granule) {
  RBEE_CHECK(!weights.empty() && granule >= 1 && total >= 0 && total % granule == 0,
             "proportional_split: {} units in granules of {} over {} parts", total, granule, weights.size());
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  RBEE_CHECK(sum > 0, "proportional_split: every weight is 0");
  const int units = total / granule;
  std::vector<int> parts(weights.size(), 0);
  std::vector<std::pair<double, size_t>> fractions;
  int given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double exact = units * weights[i] / sum;
    parts[i] = (int)std::floor(exact);
    given += parts[i];
    if (weights[i] > 0) fractions.push_back({exact - parts[i], i});
  }
  std::stable_sort(fractions.begin(), fractions.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < units; ++k, ++given) parts[fractions[k % fractions.size()].second] += 1;
  for (int& p : parts) p *= granule;
  return parts;
}

}  // namespace rbee::llm
