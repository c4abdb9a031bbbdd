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
#include "core/settings_agreement.h"
#include "test_util.h"
#include "weft/weft.h"

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
                          "WEFT_KERNEL_ISA", "WEFT_ALOG", "WEFT_TUNING_FILE", "WEFT_CHUNK_BYTES"})
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
  // A byte count documented with the default "auto" takes the word (the caller's default);
  // one documented otherwise does not.
  setenv("WEFT_COMPRESSION_CHUNK_BYTES", "auto", 1);
  EXPECT_EQ(*weft::SettingBytes("WEFT_COMPRESSION_CHUNK_BYTES", 7), 7u);
  EXPECT_TRUE(weft::ValidateSettings().ok());
  setenv("WEFT_SHM_RING_BYTES", "auto", 1);
  EXPECT_FALSE(weft::SettingBytes("WEFT_SHM_RING_BYTES", 0).ok());
  unsetenv("WEFT_COMPRESSION_CHUNK_BYTES");
}

// Each kind's bad value: InvalidArgument with "NAME=VALUE" and what was expected.
TEST_F(SettingsEnv, BadValuesAreErrorsNamingVariableAndValue) {
  struct Case { const char* name; const char* value; const char* expected; };
  const Case cases[] = {
      {"WEFT_SPIN_US", "fast", "an integer in [0, 10000000]"},
      {"WEFT_SPIN_US", "-1", "an integer in [0, 10000000]"},
      {"WEFT_CHECK", "maybe", "0 or 1"},
      {"WEFT_SHM_RING_BYTES", "4X", "a byte count"},
      // 0 would fail every TCP message that arrives before its recv (was accepted).
      {"WEFT_TCP_MAX_UNEXPECTED_BYTES", "0", "a byte count >= 1"},
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

// A thread communicator refuses a bad value, naming it (instead of running with the default
// as before). weftCommInitAll keeps a creation error on each communicator and returns it from
// their first call (as for WEFT_INPROC_GROUPS), so the check is on that call.
TEST_F(SettingsEnv, BadValueFailsThreadCommunicatorCreation) {
  setenv("WEFT_SPIN_US", "fast", 1);
  weftComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(weftCommInitAll(comms, 2, nullptr), weftSuccess);
  float x = 1;
  EXPECT_EQ(weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comms[0], nullptr), weftInvalidUsage);
  EXPECT_NE(std::string(weftGetLastError(comms[0])).find("WEFT_SPIN_US=fast"), std::string::npos)
      << weftGetLastError(comms[0]);
  for (weftComm_t c : comms) weftCommDestroy(c);
  unsetenv("WEFT_SPIN_US");
}

// Processes: a bad value on rank 0 only (WEFT_SOCKET_NSTREAMS=0; rank 1 has the valid 1) fails
// creation on both ranks, rank 0 naming the value and rank 1 naming rank 0, within seconds.
TEST(SettingsProcesses, BadValueOnOneRankFailsCreationEverywhere) {
  const weft_test::LaunchOutcome o = weft_test::LaunchRanks(
      2, {weft_test::BinPath("weft_test_worker"), "layout"},
      {{"WEFT_SOCKET_NSTREAMS", "{rank}"}, {"WEFT_INIT_TIMEOUT", "30"}}, 60);
  ASSERT_FALSE(o.timed_out) << o.output[0] << o.output[1];
  EXPECT_FALSE(weft_test::ExitedZero(o.status[0]));
  EXPECT_FALSE(weft_test::ExitedZero(o.status[1]));
  EXPECT_NE(o.output[0].find("WEFT_SOCKET_NSTREAMS=0"), std::string::npos) << o.output[0];
  EXPECT_NE(o.output[1].find("rank 0 has a bad WEFT_* setting"), std::string::npos) << o.output[1];
  EXPECT_LT(o.seconds, 20.0);
}

// An unknown WEFT_* variable (a typo) is named on stderr at creation, once per process.
TEST(SettingsProcesses, UnknownVariableIsNamedOnStderr) {
  const weft_test::LaunchOutcome o = weft_test::LaunchRanks(
      2, {weft_test::BinPath("weft_test_worker"), "layout"}, {{"WEFT_ALOG", "ring"}}, 60);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(weft_test::ExitedZero(o.status[r])) << o.output[r];
    EXPECT_NE(o.output[r].find("WEFT_ALOG is not a weft setting"), std::string::npos) << o.output[r];
  }
}

// Settings agreement (src/core/settings_agreement.h): digests compare values as the library
// reads them, and a difference names the variable, this rank's value and the other ranks.
size_t AgreedIndex(const char* name) {
  const auto& names = weft::AgreedSettingNames();
  for (size_t i = 0; i < names.size(); ++i)
    if (std::string(names[i]) == name) return i;
  ADD_FAILURE() << name << " is not an agreed setting";
  return 0;
}

TEST_F(SettingsEnv, AgreementDigestsCompareParsedValuesAndFileContents) {
  const size_t check = AgreedIndex("WEFT_CHECK"), tuning = AgreedIndex("WEFT_TUNING_FILE");
  const size_t chunk = AgreedIndex("WEFT_CHUNK_BYTES");
  EXPECT_EQ(weft::AgreedSettingDigests()[check], 0u) << "unset digests as 0";
  setenv("WEFT_CHECK", "on", 1);
  const uint64_t on = weft::AgreedSettingDigests()[check];
  setenv("WEFT_CHECK", "1", 1);
  EXPECT_EQ(weft::AgreedSettingDigests()[check], on) << "on and 1 are one value";
  setenv("WEFT_CHECK", "0", 1);
  EXPECT_NE(weft::AgreedSettingDigests()[check], on);
  setenv("WEFT_CHUNK_BYTES", "1M", 1);
  const uint64_t mib = weft::AgreedSettingDigests()[chunk];
  setenv("WEFT_CHUNK_BYTES", "1048576", 1);
  EXPECT_EQ(weft::AgreedSettingDigests()[chunk], mib);
  // Two paths to equal files agree; a changed file does not.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("weft_agree_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  for (const char* f : {"a", "b"}) std::ofstream(dir / f) << "allreduce 0-inf ring 0 1\n";
  setenv("WEFT_TUNING_FILE", (dir / "a").c_str(), 1);
  const uint64_t a = weft::AgreedSettingDigests()[tuning];
  setenv("WEFT_TUNING_FILE", (dir / "b").c_str(), 1);
  EXPECT_EQ(weft::AgreedSettingDigests()[tuning], a) << "equal contents, different paths";
  std::ofstream(dir / "b") << "allreduce 0-inf oneshot 0 1\n";
  EXPECT_NE(weft::AgreedSettingDigests()[tuning], a) << "different contents";
  std::filesystem::remove_all(dir);
}

TEST_F(SettingsEnv, AgreementNamesTheVariableAndTheRanksThatDiffer) {
  const size_t n = weft::AgreedSettingNames().size(), algo = AgreedIndex("WEFT_ALGO");
  std::vector<uint64_t> all(3 * n, 7);
  EXPECT_TRUE(weft::CompareAgreedSettings(all.data(), 3, 1).ok());
  all[2 * n + algo] = 8;  // rank 2 differs
  const weft::Status st = weft::CompareAgreedSettings(all.data(), 3, 0);
  EXPECT_EQ(st.code(), weftInvalidUsage);
  EXPECT_NE(st.message().find("WEFT_ALGO must be the same on every rank"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("this rank (0) has unset, rank(s) 2 another value"), std::string::npos)
      << st.message();
  const weft::Status from2 = weft::CompareAgreedSettings(all.data(), 3, 2);
  EXPECT_NE(from2.message().find("rank(s) 0,1 another value"), std::string::npos) << from2.message();
}

// Processes: WEFT_CHECK on rank 1 only (it adds an exchange before each call that rank 0 would
// never join) fails creation on both ranks at once, naming the variable; before, the first
// collective waited for WEFT_TIMEOUT. Equal tuning files under two paths are accepted.
TEST(SettingsProcesses, PlanSettingsThatDifferFailCreationEverywhere) {
  const weft_test::LaunchOutcome o = weft_test::LaunchRanks(
      2, {weft_test::BinPath("weft_test_worker"), "layout"},
      {{"WEFT_CHECK", "{rank}"}, {"WEFT_INIT_TIMEOUT", "30"}, {"WEFT_TIMEOUT", "30"}}, 60);
  ASSERT_FALSE(o.timed_out) << o.output[0] << o.output[1];
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(weft_test::ExitedZero(o.status[r])) << o.output[r];
    EXPECT_NE(o.output[r].find("WEFT_CHECK must be the same on every rank: this rank (" +
                               std::to_string(r) + ") has \"" + std::to_string(r) + "\", rank(s) " +
                               std::to_string(1 - r) + " another value"),
              std::string::npos)
        << o.output[r];
  }
  EXPECT_LT(o.seconds, 20.0);
}

TEST(SettingsProcesses, EqualTuningFilesUnderTwoPathsAgree) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("weft_agree_p_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  for (const char* f : {"t0", "t1"}) std::ofstream(dir / f) << "allreduce 0-inf ring 0 1\n";
  const weft_test::LaunchOutcome o = weft_test::LaunchRanks(
      2, {weft_test::BinPath("weft_test_worker"), "layout"},
      {{"WEFT_TUNING_FILE", (dir / "t{rank}").string()}}, 60);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(weft_test::ExitedZero(o.status[r])) << o.output[r];
  std::ofstream(dir / "t1") << "allreduce 0-inf oneshot 0 1\n";
  const weft_test::LaunchOutcome d = weft_test::LaunchRanks(
      2, {weft_test::BinPath("weft_test_worker"), "layout"},
      {{"WEFT_TUNING_FILE", (dir / "t{rank}").string()}}, 60);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(weft_test::ExitedZero(d.status[r])) << d.output[r];
    EXPECT_NE(d.output[r].find("WEFT_TUNING_FILE must be the same on every rank (the file's "
                               "contents are compared)"),
              std::string::npos)
        << d.output[r];
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
