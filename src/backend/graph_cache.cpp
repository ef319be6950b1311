// The capture / replay / fall-back rules of a graphed step (rbee/backend/graph_cache.h).
#include "rbee/backend/graph_cache.h"

#include "rbee/core/log.h"

namespace rbee {

void GraphRecorder::release(Recording& rec) {
  if (!rec.has_graph) return;
  rec.has_graph = false;
  device_.release_graph(rec.graph);
}

Tensor GraphRecorder::replay(Recording& rec, bool copy_out) {
  device_.replay_graph(rec.graph);
  ++replays_;
  return copy_out ? rec.out.clone() : rec.out;
}

Tensor GraphRecorder::step(Recording& rec, FunctionRef<std::string()> key, FunctionRef<Tensor()> body, bool copy_out) {
  if (rec.has_graph) return replay(rec, copy_out);
  if (!enabled_ || rec.eager_only || !rec.warmed) {
    rec.warmed = true;  // this eager run put the step's temporaries into the allocator's cache
    return body();
  }
  try {
    device_.begin_graph_capture();
  } catch (const std::exception& err) {
    enabled_ = false;
    log::info("{} graphs off on {}: {}", what_, device_.id(), err.what());
    return body();
  }
  Tensor out;
  try {
    out = body();
  } catch (const std::exception& err) {
    try {
      device_.release_graph(device_.end_graph_capture());
    } catch (const std::exception&) {
      // end_graph_capture reports the broken capture: handled by running eagerly below
    }
    rec.eager_only = true;
    log::info("{} {} runs eagerly: its graph capture failed: {}", what_, key(), err.what());
    return body();
  }
  try {
    rec.graph = device_.end_graph_capture();
  } catch (const std::exception& err) {
    rec.eager_only = true;
    log::info("{} {} runs eagerly: {}", what_, key(), err.what());
    return body();
  }
  rec.has_graph = true;
  rec.out = out;
  ++captures_;
  log::debug("{} graph recorded for {}", what_, key());
  return replay(rec, copy_out);
}

}  // namespace rbee
