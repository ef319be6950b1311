// GraphCache: a step of device work recorded once per key as a device graph (Device::begin_graph_capture) and
// replayed from then on, so that a step costs one graph launch instead of one launch per kernel. Used by the LLM
// decode step (llm::DecodeGraphs) and the SD UNet step (sd::UNetStepGraph); a new graphed step should use it too.
//
// A graph replays fixed device addresses and launch shapes, so an entry holds everything its graph depends on:
//   Key    what makes a recorded graph valid: shapes, dtypes, the addresses of memory outside the entry that the
//          step reads or writes in place. Needs `==` and `std::string to_string() const` (for the logs).
//   Slots  the step's input tensors, made once per entry (make(), before the warm-up run, so the capture finds the
//          allocator's cache as that run left it) and refreshed in place before every step (fill()).
// Life of an entry (Device's rules for graph capture):
//   1st step   eager (body()): its temporaries land in the caching allocator's cache, which a capture draws from;
//   2nd step   body() under capture, then one replay; the entry keeps the graph and the output tensor it writes;
//   later      replay. A replay overwrites that output, so run() hands out a copy of it (or, with copy_out false,
//              the output itself, valid until the next step: for a caller that never reads it or reads it at once).
// Failures fall back to eager steps, which run the same kernels on the same data (so give the same bits):
//   - begin_graph_capture() throws (the device refuses graphs): the whole cache is off (enabled() false) and every
//     later step runs eagerly; logged once;
//   - body() or end_graph_capture() throws while capturing: that entry runs eagerly from then on (other keys still
//     record); logged once per entry; the failed capture's step is re-run eagerly.
// At most `max_entries` entries live (each holds its intermediates in the graph's memory pool); beyond that the
// least recently used one is released. clear() releases all (when the memory the keys name goes away).
// Not thread-safe: one GraphCache per thread of work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <utility>

#include "rbee/core/device.h"
#include "rbee/core/error.h"
#include "rbee/core/function_ref.h"
#include "rbee/core/tensor.h"

namespace rbee {

// The key-independent part of GraphCache: one entry's recording and the capture / replay / fall-back rules above.
class GraphRecorder {
 public:
  // One entry's graph and the state of its life above.
  struct Recording {
    Device::GraphId graph = 0;
    Tensor out;  // the recorded step's output, rewritten by each replay
    bool has_graph = false, warmed = false, eager_only = false;
  };

  // `what` names the step in log lines ("decode step", "UNet step"). enabled false: every step eager.
  GraphRecorder(Device& device, std::string what, bool enabled)
      : device_(device), what_(std::move(what)), enabled_(enabled) {}
  GraphRecorder(const GraphRecorder&) = delete;
  GraphRecorder& operator=(const GraphRecorder&) = delete;

  // One step of `rec` (whose inputs are already in place): replay, eager warm-up, capture or eager fall-back.
  // `key` describes the entry for the logs.
  // copy_out false: a replay returns rec.out itself instead of a copy (see GraphCache::run).
  Tensor step(Recording& rec, FunctionRef<std::string()> key, FunctionRef<Tensor()> body, bool copy_out = true);
  // Releases rec's graph, if any (the entry may then record again).
  void release(Recording& rec);

  Device& device() const { return device_; }
  bool enabled() const { return enabled_; }
  uint64_t captures() const { return captures_; }
  uint64_t replays() const { return replays_; }

 private:
  Tensor replay(Recording& rec, bool copy_out);

  Device& device_;
  std::string what_;
  bool enabled_;
  uint64_t captures_ = 0, replays_ = 0;
};

template <class Key, class Slots>
class GraphCache {
 public:
  GraphCache(Device& device, size_t max_entries, std::string what, bool enabled = true)
      : recorder_(device, std::move(what), enabled), max_entries_(max_entries) {
    RBEE_CHECK(max_entries >= 1, "graph cache: max_entries must be at least 1");
  }
  ~GraphCache() { clear(); }
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // One step for `key`: finds its entry (or makes one, slots from make(), releasing the least recently used entry
  // beyond max_entries), writes the step's inputs into the slots (fill(slots)), then replays the entry's graph or
  // runs body(slots) as the life above says. body must only issue device work on the cache's device that reads
  // the slots and memory named by the key (no host copies), and returns the step's output. copy_out false: a
  // replayed step returns the graph's output tensor itself, which the next step overwrites (no copy launched).
  Tensor run(const Key& key, FunctionRef<Slots()> make, FunctionRef<void(Slots&)> fill,
             FunctionRef<Tensor(const Slots&)> body, bool copy_out = true) {
    Entry& e = entry(key, make);
    fill(e.slots);
    return recorder_.step(e.rec, [&] { return e.key.to_string(); }, [&] { return body(e.slots); }, copy_out);
  }

  // Releases every entry and its graph. Errors of a device that is failing or torn down are swallowed: nothing
  // is left to free then.
  void clear() {
    for (Entry& e : entries_) {
      try {
        recorder_.release(e.rec);
      } catch (const std::exception&) {
        // see above
      }
    }
    entries_.clear();
  }

  // False once the device refused to capture (or when made disabled): run() then steps eagerly.
  bool enabled() const { return recorder_.enabled(); }
  // Graphs recorded and steps replayed so far (for tests, logs and benches).
  uint64_t captures() const { return recorder_.captures(); }
  uint64_t replays() const { return recorder_.replays(); }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    Key key;
    Slots slots;
    GraphRecorder::Recording rec;
  };

  Entry& entry(const Key& key, FunctionRef<Slots()> make) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->key == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return entries_.front();
      }
    }
    while (!entries_.empty() && entries_.size() >= max_entries_) {
      recorder_.release(entries_.back().rec);
      entries_.pop_back();
    }
    entries_.push_front(Entry{key, make(), {}});
    return entries_.front();
  }

  GraphRecorder recorder_;
  size_t max_entries_;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace rbee
