// The settings table (src/common/settings.h): every WEFT_* name in the sources has a row, every
// row is documented in the README, and a bad value is an error naming the variable and value.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "common/settings.h"

namespace {

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "WEFT_X" string literals (the start of one: "WEFT_X=" in messages counts) in the library and
// tools: each names a variable weft reads or sets.
std::set<std::string> NamesInSources() {
  std::set<std::string> names;
  const std::regex literal("\"(WEFT_[A-Z0-9_]*[A-Z0-9])");
  const std::filesystem::path root(WEFT_SOURCE_DIR);
  for (const char* dir : {"src", "algorithms", "kernels", "transports", "tools"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cc" && ext != ".h") continue;
      const std::string text = ReadFile(e.path());
      for (std::sregex_iterator it(text.begin(), text.end(), literal), end; it != end; ++it)
        names.insert((*it)[1].str());
    }
  }
  return names;
}

TEST(Settings, EveryNameInTheSourcesHasARow) {
  const std::set<std::string> names = NamesInSources();
  ASSERT_GT(names.size(), 20u) << "the scan found too few names to be right";
  for (const std::string& n : names)
    EXPECT_NE(weft::FindSetting(n), nullptr) << n << " is read or set but has no row in src/common/settings.cc";
}

TEST(Settings, EveryRowIsInTheReadme) {
  const std::string readme = ReadFile(std::filesystem::path(WEFT_SOURCE_DIR) / "README.md");
  for (const weft::SettingInfo& s : weft::AllSettings())
    EXPECT_NE(readme.find(std::string("`") + s.name), std::string::npos) << s.name << " is not in README.md";
}

class SettingsEnv : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* n : {"WEFT_SPIN_US", "WEFT_CHECK", "WEFT_SHM_RING_BYTES", "WEFT_TIMEOUT",
                          "WEFT_KERNEL_ISA", "WEFT_ALOG"})
      unsetenv(n);
  }
};

TEST_F(SettingsEnv, GoodValuesParse) {
  EXPECT_EQ(*weft::SettingInt("WEFT_SPIN_US", 5), 5) << "unset -> fallback";
  setenv("WEFT_SPIN_US", "250", 1);
  EXPECT_EQ(*weft::SettingInt("WEFT_SPIN_US", 5), 250);
  setenv("WEFT_CHECK", "on", 1);
  EXPECT_TRUE(*weft::SettingFlag("WEFT_CHECK", false));
  setenv("WEFT_SHM_RING_BYTES", "4M", 1);
  EXPECT_EQ(*weft::SettingBytes("WEFT_SHM_RING_BYTES", 0), size_t{4} << 20);
  setenv("WEFT_SHM_RING_BYTES", "64KiB", 1);
  EXPECT_EQ(*weft::SettingBytes("WEFT_SHM_RING_BYTES", 0), size_t{64} << 10);
  setenv("WEFT_TIMEOUT", "0.5", 1);
  EXPECT_DOUBLE_EQ(*weft::SettingSeconds("WEFT_TIMEOUT", 300), 0.5);
  setenv("WEFT_KERNEL_ISA", "Generic", 1);
  EXPECT_EQ(*weft::SettingChoice("WEFT_KERNEL_ISA", ""), "generic");
  EXPECT_TRUE(weft::ValidateSettings().ok());
}

// Each kind's bad value: InvalidArgument with "NAME=VALUE" and what was expected.
TEST_F(SettingsEnv, BadValuesAreErrorsNamingVariableAndValue) {
  struct Case { const char* name; const char* value; const char* expected; };
  const Case cases[] = {
      {"WEFT_SPIN_US", "fast", "an integer in [0, 10000000]"},
      {"WEFT_SPIN_US", "-1", "an integer in [0, 10000000]"},
      {"WEFT_CHECK", "maybe", "0 or 1"},
      {"WEFT_SHM_RING_BYTES", "4X", "a byte count"},
      {"WEFT_SHM_RING_BYTES", "99999999999999999999G", "a byte count"},
      {"WEFT_TIMEOUT", "-3", "a number of seconds >= 0"},
      {"WEFT_KERNEL_ISA", "sse9", "one of generic,avx2"},
  };
  for (const Case& c : cases) {
    setenv(c.name, c.value, 1);
    const weft::Status st = weft::ValidateSettings();
    EXPECT_EQ(st.code(), weftInvalidArgument) << c.name << "=" << c.value;
    EXPECT_NE(st.message().find(std::string(c.name) + "=" + c.value), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.expected), std::string::npos) << st.message();
    unsetenv(c.name);
  }
  setenv("WEFT_SPIN_US", "fast", 1);
  EXPECT_EQ(weft::SettingIntOr("WEFT_SPIN_US", 7), 7) << "the Or form falls back";
}

TEST_F(SettingsEnv, UnknownNamesAreFound) {
  setenv("WEFT_ALOG", "allreduce:ring", 1);
  const std::vector<std::string> unknown = weft::UnknownSettingsInEnvironment();
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), "WEFT_ALOG"), unknown.end());
  EXPECT_EQ(std::find(unknown.begin(), unknown.end(), "WEFT_SPIN_US"), unknown.end());
}

}  // namespace
