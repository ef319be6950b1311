#include "harness.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "rbee/core/env.h"
#include "rbee/core/half.h"

namespace rbee::test {

std::vector<std::string> conformance_backends() { return {"cpu", "cuda", "rocm"}; }

Device& cpu_device() { return Registry::global().cpu(); }

Device* device_for_backend(const std::string& backend) {
  static bool loaded = [] {
    Registry::global().load_plugins();
    return true;
  }();
  (void)loaded;
  Backend* b = Registry::global().find(backend);
  if (!b || b->device_count() == 0) return nullptr;
  int index = 0;
  index = (int)env::integer_or("RBEE_TEST_DEVICE", 0, 0, 1023);
  return &b->device(index < b->device_count() ? index : 0);
}

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Strided: return "strided";
    case Layout::Transposed: return "transposed";
  }
  return "unknown";
}

double round_to_dtype(double v, DType dtype) {
  switch (dtype) {
    case DType::F64: return v;
    case DType::F32: return (double)(float)v;
    case DType::F16: return (double)f16((float)v).to_float();
    case DType::BF16: return (double)bf16((float)v).to_float();
    case DType::I64:
    case DType::I32: return std::nearbyint(v);
    case DType::U32:
    case DType::U8: return std::max(0.0, std::nearbyint(v));
    default: ADD_FAILURE() << "round_to_dtype: block dtype " << dtype_name(dtype); return v;
  }
}

std::vector<double> random_values(int64_t n, DType dtype, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> out((size_t)n);
  for (auto& v : out) v = round_to_dtype(dist(rng), dtype);
  return out;
}

namespace {

// Writes `v` as one element of `dtype` at dst.
void encode(double v, DType dtype, void* dst) {
  switch (dtype) {
    case DType::F32: { float f = (float)v; std::memcpy(dst, &f, 4); return; }
    case DType::F64: std::memcpy(dst, &v, 8); return;
    case DType::F16: { f16 h((float)v); std::memcpy(dst, &h, 2); return; }
    case DType::BF16: { bf16 h((float)v); std::memcpy(dst, &h, 2); return; }
    case DType::I64: { int64_t i = (int64_t)v; std::memcpy(dst, &i, 8); return; }
    case DType::I32: { int32_t i = (int32_t)v; std::memcpy(dst, &i, 4); return; }
    case DType::U32: { uint32_t i = (uint32_t)(int64_t)v; std::memcpy(dst, &i, 4); return; }
    case DType::U8: { uint8_t i = (uint8_t)(int64_t)v; std::memcpy(dst, &i, 1); return; }
    default: throw std::runtime_error("encode: block dtype");
  }
}

double decode(const void* src, DType dtype) {
  switch (dtype) {
    case DType::F32: { float f; std::memcpy(&f, src, 4); return f; }
    case DType::F64: { double d; std::memcpy(&d, src, 8); return d; }
    case DType::F16: { f16 h; std::memcpy(&h, src, 2); return h.to_float(); }
    case DType::BF16: { bf16 h; std::memcpy(&h, src, 2); return h.to_float(); }
    case DType::I64: { int64_t i; std::memcpy(&i, src, 8); return (double)i; }
    case DType::I32: { int32_t i; std::memcpy(&i, src, 4); return i; }
    case DType::U32: { uint32_t i; std::memcpy(&i, src, 4); return i; }
    case DType::U8: { uint8_t i; std::memcpy(&i, src, 1); return i; }
    default: throw std::runtime_error("decode: block dtype");
  }
}

}  // namespace

Tensor make_tensor(const std::vector<double>& values, const Shape& shape, DType dtype, Device& device,
                   Layout layout) {
  if ((int64_t)values.size() != shape.numel()) {
    throw std::runtime_error("make_tensor: value count does not match the shape");
  }
  const int es = dtype_type_size(dtype);
  const int rank = shape.rank();
  if (layout == Layout::Transposed && rank < 2) layout = Layout::Contiguous;
  if (layout == Layout::Strided && rank < 1) layout = Layout::Contiguous;

  Shape storage_shape = shape;
  if (layout == Layout::Strided) storage_shape[rank - 1] *= 2;
  if (layout == Layout::Transposed) std::swap(storage_shape[rank - 1], storage_shape[rank - 2]);
  std::vector<unsigned char> storage((size_t)(storage_shape.numel() * es), 0xFF);  // gaps hold poison
  const Strides logical = shape.contiguous_strides();
  const Strides stored = storage_shape.contiguous_strides();
  for (int64_t flat = 0; flat < shape.numel(); ++flat) {
    // logical multi-index -> storage offset
    int64_t rem = flat, off = 0;
    for (int d = 0; d < rank; ++d) {
      const int64_t i = rem / logical[d];
      rem %= logical[d];
      int sd = d;
      if (layout == Layout::Transposed && d >= rank - 2) sd = d == rank - 1 ? rank - 2 : rank - 1;
      int64_t stride = stored[sd];
      if (layout == Layout::Strided && d == rank - 1) stride *= 2;
      off += i * stride;
    }
    encode(values[(size_t)flat], dtype, storage.data() + off * es);
  }
  Tensor t = Tensor::from_host(storage.data(), storage.size(), storage_shape, dtype, device);
  if (layout == Layout::Strided) return t.slice(-1, 0, storage_shape[rank - 1], 2);
  if (layout == Layout::Transposed) return t.transpose(-1, -2);
  return t;
}

std::vector<double> to_doubles(const Tensor& t) {
  const Tensor host = t.to(cpu_device()).contiguous();
  const int es = dtype_type_size(host.dtype());
  const auto* p = static_cast<const unsigned char*>(host.data());
  std::vector<double> out((size_t)host.numel());
  for (size_t i = 0; i < out.size(); ++i) out[i] = decode(p + i * es, host.dtype());
  return out;
}

void poison_allocations(Device& device, size_t bytes, int count) {
  std::vector<std::shared_ptr<Buffer>> blocks;
  for (int i = 0; i < count; ++i) {
    auto b = device.allocate(bytes);
    std::vector<unsigned char> junk(b->size(), 0xFF);
    device.copy_from_host(b->data(), junk.data(), junk.size());
    blocks.push_back(std::move(b));
  }
  device.synchronize();
  // Released in reverse so the first block poisoned is the first handed out again.
  while (!blocks.empty()) blocks.pop_back();
}

Tolerance default_tolerance(DType dtype) {
  switch (dtype) {
    case DType::F64: return {1e-12, 1e-12};
    case DType::F32: return {1e-6, 1e-5};
    case DType::F16: return {1e-3, 2e-3};
    case DType::BF16: return {8e-3, 1.6e-2};
    default: return {0.0, 0.0};
  }
}

::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want,
                                     Tolerance tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != expected " << want.size();
  }
  int64_t bad = 0;
  std::string first;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    if (std::isnan(w)) ok = std::isnan(g);
    else if (std::isinf(w)) ok = g == w;
    else ok = !std::isnan(g) && std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w);
    if (!ok) {
      if (bad < 5) first += fmt::format("\n  [{}] got {} want {}", i, g, w);
      if (!std::isnan(g)) worst = std::max(worst, std::fabs(g - w));
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ (atol " << tol.atol
                                       << ", rtol " << tol.rtol << ", worst abs diff " << worst << ")" << first;
}

int64_t flat_index(const Shape& shape, std::initializer_list<int64_t> idx) {
  int64_t flat = 0;
  int d = 0;
  for (int64_t i : idx) flat = flat * shape[d++] + i;
  return flat;
}

}  // namespace rbee::test
