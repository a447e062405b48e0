// tests/temp_dir.h: a fresh directory under the system temp dir (mkdtemp: unique across
// processes and objects, so tests running in parallel never share one), removed with everything
// in it when the object goes away.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <filesystem>
#include <string>
#include <system_error>

namespace unmask::test {

struct TempDir {
  std::filesystem::path path;
  /// mkdtemp(3) under the system temp dir: a name no other process or object has.
  explicit TempDir(const std::string& prefix = "unmask_test") {
    std::string templ = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed for " + templ);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string operator/(const std::string& name) const { return file(name); }
};

}  // namespace unmask::test
