// The plug-in ABI check: the engine refuses a backend library built against another kernel interface, naming
// both versions, before running any of its code but the version query (stand-in plug-ins: tests/plugins/).
#include <dlfcn.h>

#include <string>

#include <gtest/gtest.h>

#include "rbee/backend/device.h"
#include "rbee/backend/plugin_abi.h"

namespace rbee {
namespace {

std::string plugin_path(const char* variant) {
  return std::string(RBEE_TEST_PLUGIN_DIR) + "/" + variant + "/librbee_backend_cuda.so";
}

// The version a plug-in library reports, read directly.
uint64_t reported_version(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(handle, nullptr) << dlerror();
  if (!handle) return 0;
  auto abi = reinterpret_cast<BackendPluginAbi>(dlsym(handle, kBackendAbiSymbol));
  const uint64_t v = abi ? abi() : 0;
  dlclose(handle);
  return v;
}

TEST(PluginAbi, AStalePluginIsRefusedNamingBothVersions) {
  const std::string path = plugin_path("stale");
  const uint64_t stale = reported_version(path);
  ASSERT_NE(stale, 0u);
  ASSERT_NE(stale, kPluginAbiVersion);
  const std::string line = Registry::global().load_plugin(path);
  EXPECT_NE(line.find("refused: built against kernel interface " + plugin_abi_name(stale)), std::string::npos)
      << line;
  EXPECT_NE(line.find("this engine has " + plugin_abi_name(kPluginAbiVersion)), std::string::npos) << line;
  EXPECT_EQ(line.find("registration entry ran"), std::string::npos) << line;
  EXPECT_EQ(Registry::global().find("cuda"), nullptr);
}

TEST(PluginAbi, APluginWithoutAVersionIsRefused) {
  const std::string line = Registry::global().load_plugin(plugin_path("unversioned"));
  EXPECT_NE(line.find("refused: built against kernel interface (none: no rbee_backend_abi symbol)"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("registration entry ran"), std::string::npos) << line;
}

TEST(PluginAbi, APluginOfThisTreeIsLoaded) {
  const std::string path = plugin_path("current");
  EXPECT_EQ(reported_version(path), kPluginAbiVersion);
  const std::string line = Registry::global().load_plugin(path);
  EXPECT_NE(line.find("registration entry ran"), std::string::npos) << line;
  EXPECT_EQ(line.find("refused"), std::string::npos) << line;
}

TEST(PluginAbi, TheVersionFollowsTheOpTableAndTheRevision) {
  const std::string_view table = plugin_abi_detail::kOpTableText;
  EXPECT_NE(table.find("op Softmax floating ALL softmax (const Tensor& x, Tensor& out)\n"), std::string::npos);
  EXPECT_NE(table.find("unary GeluTanh gelu_tanh\n"), std::string::npos);
  std::string edited(table);
  edited.replace(edited.find("float eps"), 9, "double eps");  // one kernel parameter's type changes
  EXPECT_NE(plugin_abi_version(kPluginInterfaceRevision, edited), kPluginAbiVersion);
  EXPECT_NE(plugin_abi_version(kPluginInterfaceRevision + 1, table), kPluginAbiVersion);
  EXPECT_EQ(plugin_abi_version(kPluginInterfaceRevision, table), kPluginAbiVersion);
  EXPECT_EQ(plugin_abi_name(((uint64_t)3 << 32) | 0xabcu), "r3.00000abc");
}

}  // namespace
}  // namespace rbee
