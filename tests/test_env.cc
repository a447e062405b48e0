// tests/test_env.cc: the UNMASK_* environment settings are read strictly (core/env.h): a value a
// setting does not take is an Error naming the variable, never a silent default; and the
// settings read through it (the op profile's shape split, the CPU LayerNorm dropout form) fail
// the same way.
#include <gtest/gtest.h>

#include <string>

#include "core/env.h"
#include "error_test_util.h"
#include "ops/ops.h"
#include "scoped_env.h"
#include "unmask/context.h"
#include "unmask/error.h"

using namespace unmask;
using unmask::test::error_of;
using unmask::test::ScopedEnv;

namespace {
constexpr const char* kVar = "UNMASK_TEST_ENV_SETTING";
}  // namespace

TEST(EnvSettings, SwitchTakesZeroOrOneAndNothingElse) {
  {
    const ScopedEnv unset(kVar, nullptr);
    EXPECT_FALSE(env_switch_opt(kVar).has_value());
    EXPECT_TRUE(env_switch(kVar, true));
    EXPECT_FALSE(env_switch(kVar, false));
  }
  {
    const ScopedEnv on(kVar, "1");
    EXPECT_EQ(env_switch_opt(kVar), std::optional<bool>(true));
    EXPECT_TRUE(env_switch(kVar, false));
  }
  {
    const ScopedEnv off(kVar, "0");
    EXPECT_EQ(env_switch_opt(kVar), std::optional<bool>(false));
    EXPECT_FALSE(env_switch(kVar, true));
  }
  for (const char* bad : {"true", "yes", "on", "", " 1", "2", "01", "false"}) {
    const ScopedEnv set(kVar, bad);
    const std::string msg = error_of([] { env_switch(kVar, false, "1 runs the new kernel, 0 the old one"); });
    EXPECT_NE(msg.find(kVar), std::string::npos) << "'" << bad << "': " << msg;
    EXPECT_NE(msg.find("0 or 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1 runs the new kernel"), std::string::npos) << msg;
    EXPECT_THROW(env_switch_opt(kVar), Error) << "'" << bad << "'";
  }
}

TEST(EnvSettings, ChoiceTakesOneOfItsValues) {
  {
    const ScopedEnv unset(kVar, nullptr);
    EXPECT_EQ(env_choice(kVar, {64, 128}, 0), 0);
  }
  for (const char* good : {"64", "128"}) {
    const ScopedEnv set(kVar, good);
    EXPECT_EQ(env_choice(kVar, {64, 128}, 0), std::stoi(good));
  }
  for (const char* bad : {"32", "0", "128x", "64.0", "", "sixty-four"}) {
    const ScopedEnv set(kVar, bad);
    const std::string msg = error_of([] { env_choice(kVar, {64, 128}, 0); });
    EXPECT_NE(msg.find(kVar), std::string::npos) << "'" << bad << "': " << msg;
    EXPECT_NE(msg.find("64, 128"), std::string::npos) << msg;
  }
  {  // the description, when given, is in the message
    const ScopedEnv set(kVar, "4");
    EXPECT_NE(error_of([] { env_choice(kVar, {2, 3}, 2, "CTAs a SM of the kernel"); }).find("CTAs a SM of the kernel"),
              std::string::npos);
  }
}

TEST(EnvSettings, SettingsReadThroughItFailOnABadValue) {
  {
    const ScopedEnv bad("UNMASK_PROFILE_SHAPES", "yes");
    Context ctx({.num_threads = 1});
    EXPECT_THROW(ctx.set_op_profiling(true), Error);
  }
  {
    const ScopedEnv bad("UNMASK_CPU_LN_INPUT_DROPOUT", "true");
    Context ctx({.num_threads = 1});
    EXPECT_THROW(ops::layernorm_input_dropout_in_kernel(ctx), Error);
  }
}
