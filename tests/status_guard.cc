// Linked into every test binary: a StatusOr value read while it holds an error (a weft bug
// that the library itself only logs, since it must not abort) fails the running test.
#include <gtest/gtest.h>

#include "common/status.h"

namespace {

void FailTheTest(const weft::Status& error) {
  ADD_FAILURE() << "a StatusOr value was read while it holds an error: " << error.message();
}

const bool g_installed = [] {
  weft::SetStatusOrMisuseHandler(&FailTheTest);
  return true;
}();

}  // namespace
