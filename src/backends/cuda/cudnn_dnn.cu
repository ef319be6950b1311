// cuDNN behind rbee::gpu::Dnn, opened at run time (cudnn_api.h), so the plug-in loads and runs without it. One handle
// per device (made at the first convolution or attention, outside any graph capture), one plan per attention shape
// (cudnn_sdpa.cu: the fused flash-attention graph) and one per convolution shape, cached:
// an operation graph of the backend API (cudnn_graph.cu: conv + bias + residual + SiLU in one fused kernel where an
// engine takes it) or the legacy fused call (cudnn_legacy.cu: conv + bias + residual). RBEE_CONV_CUDNN_API=graph or
// =legacy takes only that API (A/B); unset, the graph is tried first. RBEE_CONV_CUDNN_TUNE=1 finalizes the graph
// heuristics' first 4 engine configurations and keeps the fastest on each shape's first (uncaptured) call, instead of
// the first ranked one (which engine wins can then differ between runs, and with it the rounding). A missing bias of
// the legacy call is a row of zeros kept here (adding +0 changes no sum).
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "backends/cuda/cudnn_api.h"
#include "backends/cuda/cudnn_plan.h"
#include "backends/cuda/cudnn_sdpa.h"
#include "backends/gpu/dnn.h"
#include "rbee/core/log.h"
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace cudnn {

const Api* open_api(std::string* why) {
  static std::once_flag once;
  static Api api;
  static std::string note;
  std::call_once(once, [] {
    // The soname of cuDNN 9 (its shim library, which loads the engine libraries it needs on first use).
    void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      note = "cuDNN not found (libcudnn.so.9); convolutions use rbee's kernels and the vendor BLAS";
      return;
    }
    Api a;
    a.lib = lib;
    auto sym = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name)); };
    GetVersionFn get_version = nullptr;
    sym(get_version, "cudnnGetVersion");
    sym(a.error_string, "cudnnGetErrorString");
    sym(a.create, "cudnnCreate");
    sym(a.destroy, "cudnnDestroy");
    sym(a.set_stream, "cudnnSetStream");
    sym(a.create_tensor, "cudnnCreateTensorDescriptor");
    sym(a.set_tensor_4d, "cudnnSetTensor4dDescriptor");
    sym(a.destroy_tensor, "cudnnDestroyTensorDescriptor");
    sym(a.create_filter, "cudnnCreateFilterDescriptor");
    sym(a.set_filter_4d, "cudnnSetFilter4dDescriptor");
    sym(a.destroy_filter, "cudnnDestroyFilterDescriptor");
    sym(a.create_conv, "cudnnCreateConvolutionDescriptor");
    sym(a.set_conv_2d, "cudnnSetConvolution2dDescriptor");
    sym(a.set_conv_math, "cudnnSetConvolutionMathType");
    sym(a.destroy_conv, "cudnnDestroyConvolutionDescriptor");
    sym(a.create_activation, "cudnnCreateActivationDescriptor");
    sym(a.set_activation, "cudnnSetActivationDescriptor");
    sym(a.destroy_activation, "cudnnDestroyActivationDescriptor");
    sym(a.fwd_workspace_size, "cudnnGetConvolutionForwardWorkspaceSize");
    sym(a.conv_bias_act_fwd, "cudnnConvolutionBiasActivationForward");
    sym(a.backend_create, "cudnnBackendCreateDescriptor");
    sym(a.backend_destroy, "cudnnBackendDestroyDescriptor");
    sym(a.backend_finalize, "cudnnBackendFinalize");
    sym(a.backend_set, "cudnnBackendSetAttribute");
    sym(a.backend_get, "cudnnBackendGetAttribute");
    sym(a.backend_execute, "cudnnBackendExecute");
    const void* fns[] = {(void*)get_version,  (void*)a.error_string,   (void*)a.create,          (void*)a.destroy,
                         (void*)a.set_stream, (void*)a.create_tensor,  (void*)a.set_tensor_4d,   (void*)a.destroy_tensor,
                         (void*)a.create_filter, (void*)a.set_filter_4d, (void*)a.destroy_filter, (void*)a.create_conv,
                         (void*)a.set_conv_2d, (void*)a.set_conv_math, (void*)a.destroy_conv,   (void*)a.create_activation,
                         (void*)a.set_activation, (void*)a.destroy_activation, (void*)a.fwd_workspace_size,
                         (void*)a.conv_bias_act_fwd, (void*)a.backend_create, (void*)a.backend_destroy,
                         (void*)a.backend_finalize, (void*)a.backend_set, (void*)a.backend_get,
                         (void*)a.backend_execute};
    for (const void* fn : fns) {
      if (!fn) {
        note = "cuDNN found (libcudnn.so.9) but an entry point is missing; convolutions use rbee's kernels";
        dlclose(lib);
        return;
      }
    }
    a.version = get_version();
    if (a.version < 90000) {
      note = fmt::format("cuDNN {} is older than 9; convolutions use rbee's kernels", a.version);
      dlclose(lib);
      return;
    }
    api = a;
    note = fmt::format("cuDNN {}.{}.{} opened at run time", a.version / 10000, a.version / 100 % 100, a.version % 100);
  });
  if (why) *why = note;
  return api.lib ? &api : nullptr;
}

}  // namespace cudnn

namespace {

// RBEE_CONV_CUDNN_API: 1 graph only, 2 legacy only, 0 (unset / other) graph, else legacy.
int api_choice() {
  static const int choice = [] {
    const char* env = std::getenv("RBEE_CONV_CUDNN_API");
    if (env && std::string_view(env) == "graph") return 1;
    if (env && std::string_view(env) == "legacy") return 2;
    return 0;
  }();
  return choice;
}

// RBEE_CONV_CUDNN_TUNE=1: graph plans time their candidates (4) on the first call.
int graph_candidates() {
  static const int n = env::flag_or("RBEE_CONV_CUDNN_TUNE", false) ? 4 : 1;
  return n;
}

class CudnnDnn final : public Dnn {
 public:
  explicit CudnnDnn(const cudnn::Api& api) : api_(api) {}
  // Runs only at the process's end (GpuDevice::release_held_memory from the plug-in's exit handler, or the device's
  // destructor); release() above is the way to free the library's state earlier. cuDNN loads its sub-libraries (graph, cnn, engines) on first use, after that exit handler was
  // registered, so their static destructors have run by then: the handle and the descriptors are left to the
  // process's end instead of being destroyed through them (as PyTorch leaves its cuDNN handles). Our own zero rows
  // go back through the CUDA runtime, which is still up then. The library stays loaded.
  ~CudnnDnn() override {
    for (auto& [key, plan] : plans_)
      if (plan) plan->abandon();
    for (auto& [key, plan] : attention_plans_)
      if (plan) plan->abandon();
    if (zeros_) cudaFree(zeros_);
    for (void* p : retired_zeros_) cudaFree(p);
  }
  const char* name() const override { return "cuDNN"; }

  // Plans (their descriptors) and the handle destroyed through the library while it is loaded and usable; made
  // again on the next call. The zero rows stay (legacy plans made later point to them; freed in the destructor).
  void release() noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    plans_.clear();
    attention_plans_.clear();
    if (handle_) api_.destroy(handle_);
    handle_ = nullptr;
  }

  bool plan_attention(const DnnAttention& a, bool may_prepare, size_t* workspace_bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    *workspace_bytes = 0;
    const auto it = attention_plans_.find(a.key());
    if (it != attention_plans_.end()) {
      if (it->second) *workspace_bytes = it->second->workspace();
      return it->second != nullptr;
    }
    if (!may_prepare) return false;
    std::unique_ptr<cudnn::SdpaPlan>& p = attention_plans_[a.key()];
    if (!ensure_handle()) return false;
    std::string why;
    p = cudnn::make_sdpa_plan(api_, handle_, a, &why);
    if (p) {
      *workspace_bytes = p->workspace();
      log::debug("cuDNN takes attention {} (softmax pattern {}, workspace {} bytes)", describe(a), p->pattern(),
                 p->workspace());
    } else {
      log::info("cuDNN takes no attention {}: {}; rbee's kernels compute it", describe(a), why);
    }
    return p != nullptr;
  }

  bool run_attention(const DnnAttention& a, float scale, const void* q, const void* k, const void* v, void* out,
                     void* workspace, size_t /*workspace_bytes*/, Stream stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = attention_plans_.find(a.key());
    if (it == attention_plans_.end() || !it->second) return false;
    if (api_.set_stream(handle_, stream) != cudnn::kSuccess) return false;
    const cudnn::Status s = it->second->run(handle_, scale, q, k, v, out, workspace);
    if (s != cudnn::kSuccess) {
      log::warn("cuDNN refused attention {}: {}; this shape takes rbee's kernels from now on", describe(a),
                api_.error_string(s));
      it->second.reset();
      return false;
    }
    return true;
  }

  bool plan(const DnnConv2d& c, bool may_prepare, size_t* workspace_bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    *workspace_bytes = 0;
    const auto it = plans_.find(c.key());
    if (it != plans_.end()) {
      if (it->second) *workspace_bytes = it->second->workspace();
      return it->second != nullptr;
    }
    if (!may_prepare) return false;
    std::unique_ptr<cudnn::ConvPlan>& p = plans_[c.key()];
    p = prepare(c);
    if (p) *workspace_bytes = p->workspace();
    return p != nullptr;
  }

  bool run(const DnnConv2d& c, const void* x, const void* w, const void* bias, const void* residual, void* out,
           void* workspace, size_t workspace_bytes, bool may_tune, Stream stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = plans_.find(c.key());
    if (it == plans_.end() || !it->second) return false;
    if (api_.set_stream(handle_, stream) != cudnn::kSuccess) return false;
    if (may_tune && it->second->needs_tuning()) {
      const int rank = it->second->tune(handle_, stream, x, w, bias, residual, out, workspace, workspace_bytes);
      log::debug("cuDNN graph API: engine configuration {} of the heuristics' ranking is the fastest for {}", rank,
                 describe(c));
    }
    const cudnn::Status s = it->second->run(handle_, x, w, bias, residual, out, workspace, workspace_bytes);
    if (s != cudnn::kSuccess) {
      log::warn("cuDNN ({} API) refused conv2d_fused {}: {}; this shape takes rbee's paths from now on",
                it->second->api(), describe(c), api_.error_string(s));
      it->second.reset();
      return false;
    }
    return true;
  }

 private:
  static std::string describe(const DnnAttention& a) {
    return fmt::format("[b {}, h {}, tq {}, tk {}, d {}] {} (strides q [{}, {}, {}] k [{}, {}, {}] v [{}, {}, {}] "
                       "out [{}, {}, {}], align {})",
                       a.b, a.h, a.tq, a.tk, a.d, a.dtype == DType::BF16 ? "bf16" : "f16", a.q_strides[0],
                       a.q_strides[1], a.q_strides[2], a.k_strides[0], a.k_strides[1], a.k_strides[2], a.v_strides[0],
                       a.v_strides[1], a.v_strides[2], a.o_strides[0], a.o_strides[1], a.o_strides[2], a.align);
  }

  // The handle of this device, made on first use (outside graph captures). False when cuDNN cannot make one.
  bool ensure_handle() {
    if (handle_) return true;
    if (api_.create(&handle_) == cudnn::kSuccess) return true;
    handle_ = nullptr;
    log::warn("cuDNN: no handle could be made; convolutions and attention use rbee's paths");
    return false;
  }

  static std::string describe(const DnnConv2d& c) {
    return fmt::format("[{}, {}, {}, {}] -> {} k{}x{} s{} ({}{}{}{}{}align {})", c.n, c.cin, c.h, c.w, c.cout, c.kh,
                       c.kw, c.stride_h, c.bias ? (c.bias_per_image ? "image bias, " : "bias, ") : "",
                       c.residual ? "residual, " : "", c.silu ? "silu, " : "", c.dtype == DType::BF16 ? "bf16, " : "",
                       c.channels_last ? "nhwc, " : "", c.align);
  }

  // A plan for `c` by the API(s) RBEE_CONV_CUDNN_API allows, or nullptr. Outside graph captures only.
  std::unique_ptr<cudnn::ConvPlan> prepare(const DnnConv2d& c) {
    if (c.dtype != DType::F16 && c.dtype != DType::BF16) return nullptr;
    const int64_t lim = int64_t{1} << 31;  // the legacy descriptors hold int strides; both APIs take these sizes
    if ((int64_t)c.n * c.cin * c.h * c.w >= lim || (int64_t)c.n * c.cout * c.ho * c.wo >= lim ||
        (int64_t)c.cout * c.cin * c.kh * c.kw >= lim)
      return nullptr;
    if (!ensure_handle()) return nullptr;
    std::string why_graph, why_legacy;
    std::unique_ptr<cudnn::ConvPlan> p;
    if (api_choice() != 2) p = cudnn::make_graph_plan(api_, handle_, c, graph_candidates(), &why_graph);
    if (!p && api_choice() != 1) {
      if (c.bias || ensure_zeros(c.cout)) p = cudnn::make_legacy_plan(api_, handle_, c, zeros_, &why_legacy);
      else why_legacy = "no device memory for the zero bias";
    }
    if (p) log::debug("cuDNN {} API takes conv2d_fused {}", p->api(), describe(c));
    else log::debug("cuDNN takes no conv2d_fused {}: graph: {}; legacy: {}", describe(c),
                    why_graph.empty() ? "not tried" : why_graph, why_legacy.empty() ? "not tried" : why_legacy);
    return p;
  }

  // zeros_ holds at least `count` 16-bit zeros (the legacy call's bias when there is none). Grown outside captures.
  bool ensure_zeros(int count) {
    if (zeros_count_ >= count) return true;
    // Plans made before (and graphs captured with them) keep the old pointer: it stays allocated until the end.
    if (zeros_) retired_zeros_.push_back(zeros_);
    zeros_ = nullptr;
    zeros_count_ = 0;
    if (cudaMalloc(&zeros_, (size_t)count * 2) != cudaSuccess) {
      cudaGetLastError();
      zeros_ = nullptr;
      return false;
    }
    // cudaMemset runs on the legacy stream, which the device's non-blocking stream does not wait for: finish it here.
    if (cudaMemset(zeros_, 0, (size_t)count * 2) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    zeros_count_ = count;
    return true;
  }

  const cudnn::Api& api_;
  cudnn::Handle handle_ = nullptr;
  void* zeros_ = nullptr;
  int zeros_count_ = 0;
  std::vector<void*> retired_zeros_;  // smaller zero rows that earlier legacy plans point to
  std::mutex mutex_;
  std::map<decltype(DnnConv2d{}.key()), std::unique_ptr<cudnn::ConvPlan>> plans_;
  std::map<std::array<int64_t, 19>, std::unique_ptr<cudnn::SdpaPlan>> attention_plans_;
};

}  // namespace

std::unique_ptr<Dnn> make_vendor_dnn(std::string* why) {
  const cudnn::Api* api = cudnn::open_api(why);
  if (!api) return nullptr;
  return std::make_unique<CudnnDnn>(*api);
}

}  // namespace rbee::gpu
