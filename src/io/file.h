// io/file.h: whole-file reads and atomic writes.
#pragma once
#include <string>
#include <string_view>

namespace unmask::io {

/// Reads a whole file; errors name the path and the OS reason.
std::string read_file(const std::string& path);
/// Writes atomically: `path.tmp.<pid>` in the same directory, fsync, rename over `path`, fsync
/// the directory. On any failure the old file (if any) is untouched and the temp file removed.
void write_file_atomic(const std::string& path, std::string_view bytes);
bool file_exists(const std::string& path);

}  // namespace unmask::io
