// tests/temp_dir.h: a fresh directory under the system temp dir, removed with everything in it
// when the object goes away; the name carries the pid and the object's address, so tests running
// in parallel (ctest -j) never share one.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace unmask::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "unmask_test") {
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace unmask::test
