#include "llm/models/decode_graph.h"

#include <algorithm>

#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/ops.h"

namespace rbee::llm {

DecodeGraphs::~DecodeGraphs() {
  for (Entry& e : entries_) {
    try {
      release(e);
    } catch (const std::exception&) {
      // The device may already be failing or torn down at exit: nothing left to free then.
    }
  }
}

void DecodeGraphs::release(Entry& e) {
  if (!e.has_graph) return;
  e.has_graph = false;
  device_.release_graph(e.graph);
}

DecodeGraphs::Entry& DecodeGraphs::entry(int64_t batch, int64_t width, std::span<const void* const> bound,
                                         size_t ints_count) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->batch == batch && it->width == width && std::equal(it->bound.begin(), it->bound.end(), bound.begin(), bound.end())) {
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front();
    }
  }
  while (entries_.size() >= kMaxEntries) {
    release(entries_.back());
    entries_.pop_back();
  }
  Entry e;
  e.batch = batch;
  e.width = width;
  e.bound.assign(bound.begin(), bound.end());
  e.ints = Tensor::empty({(int64_t)ints_count}, DType::I32, device_);
  e.x = Tensor::empty({batch, hidden_}, DType::F32, device_);
  entries_.push_front(std::move(e));
  return entries_.front();
}

Tensor DecodeGraphs::run(int64_t batch, int64_t width, std::span<const int32_t> ints,
                         std::span<const void* const> bound, const Embed& embed, const Body& body) {
  RBEE_CHECK(batch > 0 && width > 0 && (int64_t)ints.size() == batch * (6 + width),
             "decode graph: {} index values for {} sequences of table width {}", ints.size(), batch, width);
  Entry& e = entry(batch, width, bound, ints.size());
  // Inputs in place: the graph (or the eager step) reads them from these addresses.
  device_.copy_from_host(e.ints.data(), ints.data(), ints.size_bytes());
  ops::copy(e.x, embed(e.ints.narrow(0, 0, batch)));
  if (e.has_graph) {
    device_.replay_graph(e.graph);
    ++replays_;
    return e.out.clone();
  }
  if (disabled_ || e.eager_only || !e.warmed) {
    e.warmed = true;  // this eager run put the step's temporaries into the allocator's cache
    return body(e.ints, e.x);
  }
  try {
    device_.begin_graph_capture();
  } catch (const std::exception& err) {
    disabled_ = true;
    log::info("decode graphs off on {}: {}", device_.id(), err.what());
    return body(e.ints, e.x);
  }
  Tensor out;
  Device::GraphId graph = 0;
  try {
    out = body(e.ints, e.x);
  } catch (const std::exception& err) {
    try {
      device_.release_graph(device_.end_graph_capture());
    } catch (const std::exception&) {
      // end_graph_capture reports the broken capture: already handled by running eagerly below
    }
    e.eager_only = true;
    log::info("decode step of {} sequences (table width {}) runs eagerly: capture failed: {}", batch, width,
              err.what());
    return body(e.ints, e.x);
  }
  try {
    graph = device_.end_graph_capture();
  } catch (const std::exception& err) {
    e.eager_only = true;
    log::info("decode step of {} sequences (table width {}) runs eagerly: {}", batch, width, err.what());
    return body(e.ints, e.x);
  }
  e.graph = graph;
  e.has_graph = true;
  e.out = out;
  ++captures_;
  log::debug("decode graph recorded: {} sequences, table width {}", batch, width);
  device_.replay_graph(e.graph);
  ++replays_;
  return e.out.clone();
}

}  // namespace rbee::llm
