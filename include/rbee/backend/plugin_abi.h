// The binary interface between the engine (librbee_engine.so) and a backend plug-in (librbee_backend_cuda.so,
// librbee_backend_rocm.so): a plug-in built against another kernel interface must not load, because a call
// through a Kernels vtable laid out differently, or an OpKind numbered differently, fails silently.
//
// The version has two parts. The op-table hash changes with any change to the op table (an op added, removed or
// reordered, a kernel's parameters, a rule, the backends column, the unary/binary/reduce functions), so the
// common change needs no one to remember a bump. The revision is bumped by hand for the rest of what a plug-in
// compiles against: Device, Backend, Registry, Buffer, Stream, Tensor, DType, the op parameter structs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rbee {

// Bump when a type a plug-in compiles against changes outside the op table (see above).
inline constexpr uint32_t kPluginInterfaceRevision = 3;

namespace plugin_abi_detail {
// FNV-1a over the bytes of s.
constexpr uint32_t fnv1a(std::string_view s) {
  uint32_t h = 2166136261u;
  for (const char c : s) {
    h ^= (uint8_t)c;
    h *= 16777619u;
  }
  return h;
}
// The op table as text: every entry's arguments in order (the preprocessor normalizes whitespace).
inline constexpr std::string_view kOpTableText =
#define RBEE_OP(Kind, rule, backends, method, params) "op " #Kind " " #rule " " #backends " " #method " " #params "\n"
#define RBEE_MAP_OP(Kind, method, Formula, scalars, args) \
  "map " #Kind " " #method " " #Formula " " #scalars " " #args "\n"
#define RBEE_UNARY_OP(Kind, name) "unary " #Kind " " #name "\n"
#define RBEE_BINARY_OP(Kind, name) "binary " #Kind " " #name "\n"
#define RBEE_REDUCE_OP(Kind, name) "reduce " #Kind " " #name "\n"
#include "rbee/backend/op_table.def"
    "";
}  // namespace plugin_abi_detail

// A version: the revision in the high 32 bits, the hash of the op-table text in the low 32.
constexpr uint64_t plugin_abi_version(uint32_t revision, std::string_view op_table_text) {
  return ((uint64_t)revision << 32) | plugin_abi_detail::fnv1a(op_table_text);
}
// The version this translation unit was compiled with.
inline constexpr uint64_t kPluginAbiVersion =
    plugin_abi_version(kPluginInterfaceRevision, plugin_abi_detail::kOpTableText);

// "r<revision>.<op-table hash in hex>", e.g. "r1.3f2a9c10": how messages name a version (src/backend/plugin_abi.cpp).
std::string plugin_abi_name(uint64_t version);

// A plug-in exports `extern "C" uint64_t rbee_backend_abi()` returning the kPluginAbiVersion it was built with;
// the engine refuses a plug-in whose version differs from its own, or that exports none, before calling its
// registration entry (kBackendPluginSymbol, rbee/backend/device.h).
using BackendPluginAbi = uint64_t (*)();
inline constexpr const char* kBackendAbiSymbol = "rbee_backend_abi";

}  // namespace rbee
