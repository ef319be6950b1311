// A device's side stream: two independent pieces of one step's work at once (tensor split: the all-reduce of one
// half of a row-parallel product beside the product of the other half; docs/perf-notes/multi-device.md). A device
// may implement it (SideStream, the GPU devices: a second stream forked from and joined to the main one with
// events, so a graph capture records the side work as a parallel branch); elsewhere (the CPU) the free functions
// below do nothing and the work runs in issue order, which is a correct serial schedule of the same dependencies.
//
// Contract, per device, for the one thread that drives it:
//   begin_side(d)  the work issued on d afterwards (kernels, device copies, collectives) goes to the side stream,
//                  and starts only after everything issued on d before this call (fork);
//   end_side(d)    later work goes to the main stream again; it does not wait for the side work;
//   join_side(d)   the main stream's later work starts only after every side work issued so far (join).
// Rules for callers: side work must not allocate device memory that it frees before the join (the caching allocator
// does not follow streams: a block freed by side work could be handed to main-stream work while the side still
// uses it; the peer-to-peer all-reduce allocates nothing); keep every tensor the side work reads or writes alive
// until join_side; main-stream work between end_side and join_side must not touch those tensors; join before a
// graph capture ends, before reading results on the host, and before the next begin_side's side work may conflict
// with the previous one's. begin_side inside an open side section is an error (InvalidArgument). A device's
// synchronize() waits for its side stream too, and end_graph_capture joins unjoined side work.
#pragma once

#include "rbee/core/device.h"

namespace rbee {

class SideStream {
 public:
  virtual ~SideStream();
  virtual void begin_side() = 0;
  virtual void end_side() = 0;
  virtual void join_side() = 0;
  // Whether begin_side is in effect (for checks and tests).
  virtual bool side_open() const = 0;
};

// d's own SideStream where it implements one; otherwise nothing happens (serial).
void begin_side(Device& d);
void end_side(Device& d);
void join_side(Device& d);
// Whether d runs side work on a stream of its own (false: begin/end/join do nothing).
bool has_side_stream(Device& d);

// begin_side in the constructor, end_side in the destructor (also when the side work throws).
class SideSection {
 public:
  explicit SideSection(Device& d) : d_(d) { begin_side(d_); }
  ~SideSection() { end_side(d_); }
  SideSection(const SideSection&) = delete;
  SideSection& operator=(const SideSection&) = delete;

 private:
  Device& d_;
};

}  // namespace rbee
