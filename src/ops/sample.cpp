// Front-end of the sample op (token sampling; contract in op_table.def). Shapes and dtypes are checked
// everywhere; the values of the settings and token lists are checked when they live in host memory (the CPU
// backend), device backends skip ids outside the vocabulary.
#include <cmath>
#include <unordered_set>

#include "ops/op_checks.h"
#include "rbee/ops.h"

namespace rbee::ops {

using detail::check_defined;
using detail::check_supported;
using detail::common_device;

namespace {

// Weight sums of backends/common/sampling.h (2^40 per token) fit 64 bits up to 2^23 tokens.
constexpr int64_t kMaxVocab = int64_t{1} << 23;

void check_values(const char* op, const Tensor& params, const Tensor& control, const Tensor& tokens,
                  const Tensor& bias, int64_t vocab) {
  const int64_t rows = params.dim(0), h = tokens.dim(1);
  const float* p = static_cast<const float*>(params.data());
  const int64_t* c = static_cast<const int64_t*>(control.data());
  const int32_t* t = static_cast<const int32_t*>(tokens.data());
  const float* b = static_cast<const float*>(bias.data());
  std::unordered_set<int32_t> seen;
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * kSampleParams;
    const int64_t* cr = c + r * kSampleControls;
    const float temperature = pr[sample_col::kTemperature], top_p = pr[sample_col::kTopP];
    const float min_p = pr[sample_col::kMinP], repetition = pr[sample_col::kRepetition];
    RBEE_CHECK(std::isfinite(temperature) && temperature >= 0, "{}: row {}: temperature must be >= 0, got {}", op, r,
               temperature);
    RBEE_CHECK(top_p > 0 && top_p <= 1, "{}: row {}: top_p must be in (0, 1], got {}", op, r, top_p);
    RBEE_CHECK(min_p >= 0 && min_p <= 1, "{}: row {}: min_p must be in [0, 1], got {}", op, r, min_p);
    RBEE_CHECK(std::isfinite(repetition) && repetition > 0, "{}: row {}: repetition penalty must be > 0, got {}", op,
               r, repetition);
    RBEE_CHECK(std::isfinite(pr[sample_col::kPresence]) && std::isfinite(pr[sample_col::kFrequency]),
               "{}: row {}: presence and frequency penalties must be finite", op, r);
    RBEE_CHECK(cr[sample_col::kTopK] >= 0, "{}: row {}: top_k must be >= 0, got {}", op, r, cr[sample_col::kTopK]);
    RBEE_CHECK(cr[sample_col::kDraw] >= 0, "{}: row {}: draw index must be >= 0, got {}", op, r,
               cr[sample_col::kDraw]);
    seen.clear();
    for (int64_t i = 0; i < h; ++i) {
      const int32_t id = t[(r * h + i) * 2], count = t[(r * h + i) * 2 + 1];
      if (id == -1) continue;
      RBEE_CHECK(id >= 0 && id < vocab, "{}: row {}: token {} is outside the vocabulary [0, {})", op, r, id, vocab);
      RBEE_CHECK(count >= -1, "{}: row {}: token {} has count {} (must be >= -1)", op, r, id, count);
      RBEE_CHECK(!std::isnan(b[r * h + i]), "{}: row {}: the bias of token {} is NaN", op, r, id);
      RBEE_CHECK(seen.insert(id).second, "{}: row {}: token {} is listed twice", op, r, id);
    }
  }
}

}  // namespace

Tensor sample(const Tensor& logits, const Tensor& params, const Tensor& control, const Tensor& tokens,
              const Tensor& bias) {
  const char* op = "sample";
  check_defined(op, "logits", logits);
  check_defined(op, "params", params);
  check_defined(op, "control", control);
  check_defined(op, "tokens", tokens);
  check_defined(op, "bias", bias);
  Device& device = common_device(op, {&logits, &params, &control, &tokens, &bias});
  RBEE_CHECK(logits.dtype() == DType::F32 && logits.rank() == 2, "{}: logits must be f32 [B, V], got {}", op,
             logits.to_string());
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  RBEE_CHECK(vocab > 0 && vocab <= kMaxVocab, "{}: logits have {} columns; the vocabulary must be in [1, {}]", op,
             vocab, kMaxVocab);
  RBEE_CHECK(params.dtype() == DType::F32 && params.shape() == Shape({rows, kSampleParams}),
             "{}: params must be f32 [{}, {}], got {}", op, rows, kSampleParams, params.to_string());
  RBEE_CHECK(control.dtype() == DType::I64 && control.shape() == Shape({rows, kSampleControls}),
             "{}: control must be i64 [{}, {}], got {}", op, rows, kSampleControls, control.to_string());
  RBEE_CHECK(tokens.dtype() == DType::I32 && tokens.rank() == 3 && tokens.dim(0) == rows && tokens.dim(2) == 2,
             "{}: tokens must be i32 [{}, H, 2], got {}", op, rows, tokens.to_string());
  RBEE_CHECK(bias.dtype() == DType::F32 && bias.shape() == Shape({rows, tokens.dim(1)}),
             "{}: bias must be f32 [{}, {}], got {}", op, rows, tokens.dim(1), bias.to_string());
  check_supported(op, device, OpKind::Sample, {DType::F32});
  Tensor out = Tensor::empty({rows}, DType::I32, device);
  if (rows == 0) return out;
  const Tensor l = logits.contiguous(), p = params.contiguous(), c = control.contiguous(), t = tokens.contiguous(),
               b = bias.contiguous();
  if (device.host_accessible()) check_values(op, p, c, t, b, vocab);
  device.kernels().sample(l, p, c, t, b, out);
  return out;
}

}  // namespace rbee::ops
