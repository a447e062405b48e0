// io/file.h: whole-file reads and atomic writes.
//
//   std::string bytes = read_file("/x/vocab.txt");
//   write_file_atomic("/x/out.bin", bytes);          // small files: one call
//   AtomicFileWriter w("/x/big.bin");                 // big files: stream, then commit
//   w.write(p, n); w.write(q, m); w.commit();         // no commit() = old file untouched
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace unmask::io {

/// Reads a whole file; errors name the path and the OS reason.
std::string read_file(const std::string& path);
/// Writes atomically: `path.tmp.<pid>.<n>` in the same directory, fsync, rename over `path`,
/// fsync the directory. On any failure the old file (if any) is untouched and the temp file
/// removed.
void write_file_atomic(const std::string& path, std::string_view bytes);
bool file_exists(const std::string& path);

// Output guards: nothing a user had is overwritten unasked.
/// True when `a` and `b` name the same directory or one lies inside the other (symlinks and
/// `..` resolved; paths that do not exist yet compare by their normalised form).
bool paths_overlap(const std::string& a, const std::string& b);
/// The entries of directory `dir` (names only, sorted); empty when it is missing or empty.
std::vector<std::string> directory_entries(const std::string& dir);

/// The streaming form of write_file_atomic, for files too big to build in memory. The
/// constructor creates the temp file; write() appends; commit() fsyncs, renames over `path`
/// and fsyncs the directory. Destroying an uncommitted writer (an exception on the way) removes
/// the temp file and leaves `path` as it was. The new file keeps an existing file's mode.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  /// Bytes written so far.
  size_t size() const { return written_; }
  void commit();
  const std::string& temp_path() const { return tmp_; }

 private:
  void abandon() noexcept;  // close + unlink the temp file; never throws
  std::string path_, tmp_;
  int fd_ = -1;
  size_t written_ = 0;
  bool committed_ = false;
};

}  // namespace unmask::io
