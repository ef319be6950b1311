#include "llm/models/decode_graph.h"

#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/core/step_times.h"
#include "rbee/ops.h"

namespace rbee::llm {

std::string DecodeGraphs::Key::to_string() const {
  return fmt::format("of {} sequences (table width {})", batch, width);
}

Tensor DecodeGraphs::run(int64_t batch, int64_t width, std::span<const int32_t> ints,
                         std::span<const void* const> bound, const Embed& embed, const Body& body, bool output_read) {
  RBEE_CHECK(batch > 0 && width > 0 && (int64_t)ints.size() == batch * (6 + width),
             "decode graph: {} index values for {} sequences of table width {}", ints.size(), batch, width);
  const Key key{batch, width, std::vector<const void*>(bound.begin(), bound.end())};
  return graphs_.run(
      key,
      [&] {
        return Slots{Tensor::empty({(int64_t)ints.size()}, DType::I32, device_),
                     Tensor::empty({batch, hidden_}, DType::F32, device_)};
      },
      [&](Slots& in) {
        // Inputs in place: the graph (or the eager step) reads them from these addresses.
        step_times::Phase phase("decode graph: upload inputs, embeddings");
        device_.copy_from_host(in.ints.data(), ints.data(), ints.size_bytes());
        const Tensor x = embed(in.ints.narrow(0, 0, batch));
        if (x.defined()) ops::copy(in.x, x);
      },
      [&](const Slots& in) { return body(in.ints, in.x); }, output_read);
}

}  // namespace rbee::llm
