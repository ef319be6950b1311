// Component weights (rbee/sd/weights.h).
#include "rbee/sd/weights.h"

#include "rbee/backend/device.h"
#include "rbee/core/error.h"

namespace rbee::sd {

Weights Weights::open(const std::string& path, Device& device, DType dtype) {
  RBEE_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
             "sd weights: compute dtype must be f32, f16 or bf16, got {}", dtype_name(dtype));
  Weights w;
  w.ckpt_ = std::make_shared<const safetensors::Checkpoint>(safetensors::Checkpoint::open(path));
  w.device_ = &device;
  w.dtype_ = dtype;
  return w;
}

Weights Weights::sub(const std::string& prefix) const {
  Weights w = *this;
  w.prefix_ = prefix_ + prefix;
  return w;
}

bool Weights::has(const std::string& name) const { return ckpt_->find_tensor(prefix_ + name) != nullptr; }

Tensor Weights::get_f32(const std::string& name, const Shape& shape) const {
  Weights w = *this;
  w.dtype_ = DType::F32;
  return w.get(name, shape);
}

Tensor Weights::get(const std::string& name, const Shape& shape) const {
  const std::string full = prefix_ + name;
  const safetensors::TensorInfo* info = ckpt_->find_tensor(full);
  RBEE_CHECK_CODE(info != nullptr, ErrorCode::NotFound, "sd weights: '{}' has no tensor '{}'", ckpt_->directory(),
                  full);
  RBEE_CHECK(info->shape == shape, "sd weights: tensor '{}' has shape {}, the model expects {}", full,
             info->shape.to_string(), shape.to_string());
  RBEE_CHECK(info->dtype == DType::F32 || info->dtype == DType::F16 || info->dtype == DType::BF16,
             "sd weights: tensor '{}' is {}, expected a floating dtype", full, dtype_name(info->dtype));
  Tensor t = ckpt_->tensor(full, Registry::global().cpu());
  if (t.dtype() != dtype_) t = t.to(dtype_);
  return t.to(*device_).contiguous();
}

const nlohmann::json& Weights::config() const { return ckpt_->config(); }

}  // namespace rbee::sd
