// tests/cuda/test_harness.h: GoogleTest, or a tiny stand-in with the same macros.
//
// The CUDA tests build in two places: the main CMake project (with GoogleTest) and the GPU-only
// project bench/gpu/CMakeLists.txt used on the GPU machine, which may have no gtest. There
// UNMASK_MINI_TEST is defined and this header supplies the subset the tests use: TEST,
// EXPECT_/ASSERT_ {TRUE, FALSE, EQ, NE, LT, LE, GT, GE, NEAR}, EXPECT_THROW, GTEST_SKIP,
// streaming `<< message` after each, ::testing::InitGoogleTest and RUN_ALL_TESTS, and
// --gtest_filter=SUBSTRING. Output mimics gtest's ([ RUN ], [ OK ], [ FAILED ], [ SKIPPED ]).
#pragma once
#ifndef UNMASK_MINI_TEST
#include <gtest/gtest.h>
#else
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace mini_test {

struct Case {
  std::string name;
  std::function<void()> fn;
};
inline std::vector<Case>& registry() {
  static std::vector<Case> r;
  return r;
}
struct Status {
  bool failed = false, skipped = false;
};
inline Status& status() {
  static Status s;
  return s;
}
inline std::string& filter() {
  static std::string f;
  return f;
}

struct Registrar {
  Registrar(const char* suite, const char* name, void (*fn)()) {
    registry().push_back({std::string(suite) + "." + name, fn});
  }
};

class Message {
 public:
  template <typename T>
  Message& operator<<(const T& v) {
    os_ << v;
    return *this;
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

struct FailHelper {
  const char* file;
  int line;
  std::string text;
  void operator=(const Message& m) const {
    status().failed = true;
    std::printf("%s:%d: Failure\n%s\n%s\n", file, line, text.c_str(), m.str().c_str());
  }
};

struct SkipHelper {
  void operator=(const Message& m) const {
    status().skipped = true;
    std::printf("  skipped: %s\n", m.str().c_str());
  }
};

template <typename T>
std::string show(const T& v) {
  if constexpr (requires(std::ostream& os, const T& t) { os << t; }) {
    std::ostringstream os;
    os << v;
    return os.str();
  } else {
    return "<value>";
  }
}

template <typename A, typename B>
std::string cmp_text(const char* ea, const char* eb, const char* op, const A& a, const B& b) {
  return std::string("Expected: (") + ea + ") " + op + " (" + eb + "), actual: " + show(a) + " vs " + show(b);
}

inline int run_all(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--gtest_filter=", 15) == 0) filter() = argv[i] + 15;
  int passed = 0, failed = 0, skipped = 0;
  std::vector<std::string> failures;
  for (const Case& c : registry()) {
    if (!filter().empty() && filter() != "*" && c.name.find(filter()) == std::string::npos) continue;
    status() = Status{};
    std::printf("[ RUN      ] %s\n", c.name.c_str());
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      c.fn();
    } catch (const std::exception& e) {
      status().failed = true;
      std::printf("unexpected exception: %s\n", e.what());
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (status().failed) {
      ++failed;
      failures.push_back(c.name);
      std::printf("[  FAILED  ] %s (%.0f ms)\n", c.name.c_str(), ms);
    } else if (status().skipped) {
      ++skipped;
      std::printf("[  SKIPPED ] %s (%.0f ms)\n", c.name.c_str(), ms);
    } else {
      ++passed;
      std::printf("[       OK ] %s (%.0f ms)\n", c.name.c_str(), ms);
    }
    std::fflush(stdout);
  }
  std::printf("[==========] %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  for (const std::string& f : failures) std::printf("[  FAILED  ] %s\n", f.c_str());
  return failed ? 1 : 0;
}

}  // namespace mini_test

namespace mini_test {
struct Args {
  int argc = 0;
  char** argv = nullptr;
};
inline Args& args() {
  static Args a;
  return a;
}
}  // namespace mini_test
namespace testing {
inline void InitGoogleTest(int* argc, char** argv) { ::mini_test::args() = {*argc, argv}; }
}  // namespace testing
#define RUN_ALL_TESTS() ::mini_test::run_all(::mini_test::args().argc, ::mini_test::args().argv)

#define TEST(suite, name)                                                                            \
  static void mini_test_##suite##_##name();                                                          \
  static ::mini_test::Registrar mini_test_reg_##suite##_##name(#suite, #name, &mini_test_##suite##_##name); \
  static void mini_test_##suite##_##name()

#define MINI_TEST_EXPECT_(cond, text) \
  if (cond) {                         \
  } else                              \
    ::mini_test::FailHelper{__FILE__, __LINE__, text} = ::mini_test::Message()
#define MINI_TEST_ASSERT_(cond, text) \
  if (cond) {                         \
  } else                              \
    return ::mini_test::FailHelper{__FILE__, __LINE__, text} = ::mini_test::Message()
#define MINI_TEST_CMP_(kind, a, b, op) \
  kind(((a)op(b)), ::mini_test::cmp_text(#a, #b, #op, (a), (b)))

#define EXPECT_TRUE(c) MINI_TEST_EXPECT_(bool(c), "Expected true: " #c)
#define EXPECT_FALSE(c) MINI_TEST_EXPECT_(!bool(c), "Expected false: " #c)
#define ASSERT_TRUE(c) MINI_TEST_ASSERT_(bool(c), "Expected true: " #c)
#define ASSERT_FALSE(c) MINI_TEST_ASSERT_(!bool(c), "Expected false: " #c)
#define EXPECT_EQ(a, b) MINI_TEST_CMP_(MINI_TEST_EXPECT_, a, b, ==)
#define EXPECT_NE(a, b) MINI_TEST_CMP_(MINI_TEST_EXPECT_, a, b, !=)
#define EXPECT_LT(a, b) MINI_TEST_CMP_(MINI_TEST_EXPECT_, a, b, <)
#define EXPECT_LE(a, b) MINI_TEST_CMP_(MINI_TEST_EXPECT_, a, b, <=)
#define EXPECT_GT(a, b) MINI_TEST_CMP_(MINI_TEST_EXPECT_, a, b, >)
#define EXPECT_GE(a, b) MINI_TEST_CMP_(MINI_TEST_EXPECT_, a, b, >=)
#define ASSERT_EQ(a, b) MINI_TEST_CMP_(MINI_TEST_ASSERT_, a, b, ==)
#define ASSERT_NE(a, b) MINI_TEST_CMP_(MINI_TEST_ASSERT_, a, b, !=)
#define ASSERT_LT(a, b) MINI_TEST_CMP_(MINI_TEST_ASSERT_, a, b, <)
#define ASSERT_LE(a, b) MINI_TEST_CMP_(MINI_TEST_ASSERT_, a, b, <=)
#define ASSERT_GT(a, b) MINI_TEST_CMP_(MINI_TEST_ASSERT_, a, b, >)
#define ASSERT_GE(a, b) MINI_TEST_CMP_(MINI_TEST_ASSERT_, a, b, >=)
#define EXPECT_NEAR(a, b, tol) \
  MINI_TEST_EXPECT_(std::fabs(double(a) - double(b)) <= double(tol), ::mini_test::cmp_text(#a, #b, "~=", (a), (b)))
#define EXPECT_THROW(stmt, E)                                                              \
  do {                                                                                     \
    bool mini_test_caught_ = false;                                                        \
    try {                                                                                  \
      stmt;                                                                                \
    } catch (const E&) {                                                                   \
      mini_test_caught_ = true;                                                            \
    } catch (...) {                                                                        \
    }                                                                                      \
    MINI_TEST_EXPECT_(mini_test_caught_, "Expected " #stmt " to throw " #E);               \
  } while (0)
#define GTEST_SKIP() return ::mini_test::SkipHelper() = ::mini_test::Message()
#define ADD_FAILURE() MINI_TEST_EXPECT_(false, "Failure")
#define FAIL() MINI_TEST_ASSERT_(false, "Failure")
#define SCOPED_TRACE(message) ((void)0)  // (a failure here names its file and line, not the trace)
#endif
