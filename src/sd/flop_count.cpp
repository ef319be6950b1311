// FlopCounter (sd/flop_count.h).
#include "sd/flop_count.h"

namespace rbee::sd {
namespace {

thread_local FlopCounter* innermost = nullptr;

}  // namespace

FlopCounter::FlopCounter() : outer_(innermost) { innermost = this; }

FlopCounter::~FlopCounter() { innermost = outer_; }

void FlopCounter::add(double flops) {
  if (innermost) innermost->total_ += flops;
}

}  // namespace rbee::sd
