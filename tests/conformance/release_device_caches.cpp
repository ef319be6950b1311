// At the end of the conformance run, every device of every loaded backend hands its caching allocator's cached
// blocks back to the driver. Without this, the blocks kept for reuse are still held when the process exits and
// `compute-sanitizer --leak-check full` (scripts/gpu_check.sh sanitize) reports each of them as a leak; after it,
// what the leak check reports is memory that something really never released.
#include <gtest/gtest.h>

#include "rbee/backend/device.h"

namespace rbee::test {
namespace {

class ReleaseDeviceCaches : public ::testing::Environment {
 public:
  void TearDown() override {
    for (Backend* backend : Registry::global().backends()) {
      for (int i = 0; i < backend->device_count(); ++i) {
        Device& device = backend->device(i);
        device.synchronize();
        device.empty_cache();
      }
    }
  }
};

[[maybe_unused]] ::testing::Environment* const kReleaseDeviceCaches =
    ::testing::AddGlobalTestEnvironment(new ReleaseDeviceCaches);

}  // namespace
}  // namespace rbee::test
