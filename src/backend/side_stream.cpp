// The side-stream free functions (rbee/backend/side_stream.h): the device's own SideStream, or nothing (serial).
#include "rbee/backend/side_stream.h"

namespace rbee {

SideStream::~SideStream() = default;

namespace {
SideStream* side_of(Device& d) { return dynamic_cast<SideStream*>(&d); }
}  // namespace

void begin_side(Device& d) {
  if (SideStream* s = side_of(d)) s->begin_side();
}
void end_side(Device& d) {
  if (SideStream* s = side_of(d)) s->end_side();
}
void join_side(Device& d) {
  if (SideStream* s = side_of(d)) s->join_side();
}
bool has_side_stream(Device& d) { return side_of(d) != nullptr; }

}  // namespace rbee
