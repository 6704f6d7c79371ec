// Plugin ABI v2 and v1 side by side: the example built against the frozen v1 header still loads (with declarations
// derived from its capabilities), the v2 build's declarations are read, and v2 problems carry struct_size,
// abi_version and the case-name extension.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "attncheck/declarations.hpp"
#include "attncheck/plugin.h"
#include "attncheck/plugin_loader.hpp"
#include "plugin_abi.hpp"

using namespace attncheck;

namespace {
uint32_t built_abi(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(h, nullptr) << dlerror();
  if (!h) return 0;
  auto entry = reinterpret_cast<attncheck_plugin_entry_fn>(dlsym(h, ATTNCHECK_PLUGIN_ENTRY_SYMBOL));
  return entry ? entry()->abi_version : 0;
}
}  // namespace

TEST(PluginAbi, V1BuildLoadsWithDerivedDeclarations) {
  ASSERT_EQ(built_abi(V1_PLUGIN_PATH), 1u) << "the v1 test plugin must really be built against the v1 header";
  const ImplPtr impl = load_plugin(V1_PLUGIN_PATH);
  EXPECT_EQ(impl->name(), "example-plugin");
  const Declarations d = impl->declarations();
  EXPECT_FALSE(d.deterministic) << "v1 has no declarations(): nothing beyond the capabilities is assumed";
  EXPECT_FALSE(d.batch_invariant);
  EXPECT_TRUE(d.contracts.empty());
  EXPECT_FALSE(d.fully_masked_policy.has_value()) << "the example supports two policies, so none is implied";
  EXPECT_EQ(d.outputs, (std::vector<std::string>{"out", "lse", "weights"}));
}

TEST(PluginAbi, V2DeclarationsAreRead) {
  ASSERT_EQ(built_abi(EXAMPLE_PLUGIN_PATH), 2u);
  const Declarations d = load_plugin(EXAMPLE_PLUGIN_PATH)->declarations();
  EXPECT_TRUE(d.deterministic);
  EXPECT_TRUE(d.batch_invariant) << "appended to attncheck_declarations after tag 8, read when the plugin writes it";
  ASSERT_EQ(d.contracts.count(DType::f32), 1u);
  EXPECT_EQ(d.contract_for(DType::f32).to_string(),
            "qk=fp32,scores=fp32,pv=fp32,acc=fp32,p=exact,exp=exp,rope=fp32-angles");
  EXPECT_EQ(d.contract_for(DType::f16), default_contract(DType::f16)) << "undeclared dtypes take the default";
}

TEST(PluginAbi, V2ProblemsCarrySizeVersionAndTheCaseNameExtension) {
  Problem p;
  p.B = 2, p.Hq = 2, p.Lq = 3, p.Lk = 5, p.Dqk = p.Dv = 4, p.causal = true;
  Described desc;
  describe(p, desc);
  EXPECT_EQ(desc.d.struct_size, sizeof(attncheck_problem));
  EXPECT_EQ(desc.d.abi_version, ATTNCHECK_PLUGIN_ABI_VERSION);
  ASSERT_NE(desc.d.next, nullptr);
  EXPECT_EQ(desc.d.next->tag, ATTNCHECK_EXT_CASE_NAME);
  EXPECT_EQ(desc.d.next->struct_size, sizeof(attncheck_ext_case_name));
  const auto* ext = reinterpret_cast<const attncheck_ext_case_name*>(desc.d.next);
  EXPECT_EQ(std::string(ext->name), p.name());
  EXPECT_EQ(ext->header.next, nullptr);
  // The v1 part is unchanged in place: a v1 plugin reading the same pointer sees the same fields.
  EXPECT_EQ(offsetof(attncheck_problem, B), 0u);
  EXPECT_EQ(desc.d.diagonal_offset[1], 0);
}
