// tests/scoped_env.h: ScopedEnv, an environment variable set (or unset) for a scope and restored
// after, for tests of behaviour selected by UNMASK_* variables.
#pragma once
#include <cstdlib>
#include <string>

namespace unmask::test {

/// Sets `name` to `value` (null: unsets it) for its lifetime, then restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace unmask::test
