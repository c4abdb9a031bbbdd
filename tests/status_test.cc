// Status and StatusOr: context, and the guard that makes reading an error's value loud in tests.
#include <gtest/gtest.h>

#include <string>

#include "common/status.h"

namespace {

int g_misuses = 0;
std::string g_last_misuse;
void CountMisuse(const weft::Status& error) {
  ++g_misuses;
  g_last_misuse = error.message();
}

weft::StatusOr<int> Fails() { return weft::InvalidArgument("count=-1 is negative"); }

TEST(Status, ContextIsPrependedOnlyToErrors) {
  EXPECT_EQ(weft::InvalidArgument("x").WithContext("weftAllReduce").message(), "weftAllReduce: x");
  EXPECT_TRUE(weft::OkStatus().WithContext("weftAllReduce").message().empty());
}

// A read of the value of a failed StatusOr reaches the misuse handler with the error; a read of
// a good one does not. (Every test binary's default handler fails the test: status_guard.cc.)
TEST(StatusOr, ReadingTheValueOfAnErrorReachesTheHandler) {
  const weft::StatusOrMisuseHandler previous = weft::SetStatusOrMisuseHandler(&CountMisuse);
  ASSERT_NE(previous, nullptr) << "status_guard.cc did not install the test handler";
  weft::StatusOr<int> good = 7;
  EXPECT_EQ(*good, 7);
  EXPECT_EQ(g_misuses, 0);
  weft::StatusOr<int> bad = Fails();
  const int v = bad.value();
  EXPECT_EQ(v, 0);
  EXPECT_EQ(g_misuses, 1);
  EXPECT_EQ(g_last_misuse, "count=-1 is negative");
  weft::SetStatusOrMisuseHandler(previous);
}

}  // namespace
