// tests/python_reference.h: running a reference script of tests/python/ with Debian's
// /usr/bin/python3 (PyTorch and NumPy from python3-torch / python3-numpy) and reporting its log.
//
//   if (!python_has("torch, numpy")) GTEST_SKIP() << "/usr/bin/python3 has no torch or numpy";
//   const std::string failure = run_python_reference("swin_block_reference.py", dir + " 1 3 3", dir);
//   ASSERT_EQ(failure, "");
#pragma once
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace unmask::test {

/// Whether /usr/bin/python3 imports `modules` (a comma-separated import list).
inline bool python_has(const std::string& modules) {
  return std::system(("/usr/bin/python3 -c 'import " + modules + "' > /dev/null 2>&1").c_str()) == 0;
}

/// Runs tests/python/<script> <args>, its output into <dir>/python.log. Returns "" on success,
/// else the command and the log (for the assertion's message).
inline std::string run_python_reference(const std::string& script, const std::string& args, const std::string& dir) {
  const std::string log_path = dir + "/python.log";
  const std::string cmd = "/usr/bin/python3 " UNMASK_SOURCE_DIR "/tests/python/" + script + " " + args + " > " +
                          log_path + " 2>&1";
  if (std::system(cmd.c_str()) == 0) return "";
  std::ifstream lf(log_path);
  return cmd + "\n" + std::string((std::istreambuf_iterator<char>(lf)), std::istreambuf_iterator<char>());
}

}  // namespace unmask::test
