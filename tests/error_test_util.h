// tests/error_test_util.h: the message of the unmask::Error a call throws, for tests of error
// paths (bad input must give an Error that says what, where and how to fix).
#pragma once
#include <exception>
#include <string>

#include <gtest/gtest.h>

#include "unmask/error.h"

namespace unmask::test {

/// The what() of the unmask::Error that `f()` throws. A call that throws nothing, or throws
/// another exception type (a crash-like path that skipped the validation), is a test failure and
/// gives "": a test that checks a message fragment then fails twice, naming the call's line.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected an unmask::Error, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected an unmask::Error, nothing was thrown";
  return {};
}

}  // namespace unmask::test
