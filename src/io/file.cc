// io/file.cc: whole-file reads and crash-safe writes (POSIX).
//
// Atomic replace follows the usual recipe: write a temp file in the *same directory* (rename
// is only atomic within one filesystem), fsync it so its data reach the disk before the name
// does, rename it over the target, then fsync the directory so the rename itself is durable.
// A crash at any point leaves either the old file or the complete new one, never a torn file.
#include "io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "unmask/error.h"

namespace unmask::io {

namespace {

std::string os_reason(int err) { return std::strerror(err); }

// The directory holding `path` ("." for a bare file name), for the fsync after rename.
std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Distinguishes temp files of concurrent writers in one process (same pid).
std::atomic<unsigned> g_temp_counter{0};

}  // namespace

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw Error("cannot open ", path, " for reading: ", os_reason(err),
                Hint(err == ENOENT ? "check the path; relative paths are resolved from the current directory"
                                   : "check the file's permissions"));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error("cannot stat ", path, ": ", os_reason(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error("cannot read ", path, ": it is a directory", Hint("pass the path of a file inside it"));
  }
  std::string out;
  // st_size is only a hint (pipes and /proc files report 0): read until EOF either way.
  if (st.st_size > 0) out.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throw Error("error reading ", path, " after ", out.size(), " bytes: ", os_reason(err));
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw Error("cannot write a file with an empty path");
  tmp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_temp_counter++);
  // O_EXCL: never write through a temp name that something else already holds.
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    int err = errno;
    throw Error("cannot create temporary file ", tmp_, " to write ", path_, ": ", os_reason(err),
                Hint(err == ENOENT ? "the directory " + parent_dir(path_) + " does not exist; create it first"
                                   : "the directory must be writable, since the file is written beside it and renamed"));
  }
  // Keep the mode of a file we replace (a user's chmod should survive a save).
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::fchmod(fd_, st.st_mode & 07777);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) abandon();
}

void AtomicFileWriter::abandon() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  if (fd_ < 0) throw Error("write to ", path_, " after commit or failure");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Linux writes at most ~2 GiB per call; loop on short writes.
    ssize_t k = ::write(fd_, p, n < (size_t(1) << 30) ? n : (size_t(1) << 30));
    if (k < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      abandon();
      throw Error("cannot write ", path_, " (temp file ", tmp_, ") after ", written_, " bytes: ",
                  os_reason(err),
                  Hint(err == ENOSPC ? "the disk is full; free space and save again; the old file is unchanged"
                                     : "the old file is unchanged"));
    }
    p += k;
    n -= size_t(k);
    written_ += size_t(k);
  }
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) throw Error("commit of ", path_, " after commit or failure");
  if (::fsync(fd_) != 0) {
    int err = errno;
    abandon();
    throw Error("cannot fsync ", tmp_, " while writing ", path_, ": ", os_reason(err), Hint("the old file is unchanged"));
  }
  if (::close(fd_) != 0) {
    int err = errno;
    fd_ = -1;
    abandon();
    throw Error("cannot close ", tmp_, " while writing ", path_, ": ", os_reason(err), Hint("the old file is unchanged"));
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    abandon();
    throw Error("cannot rename ", tmp_, " to ", path_, ": ", os_reason(err),
                Hint(err == EISDIR ? "the target is a directory; choose a file name"
                                   : "the old file is unchanged"));
  }
  committed_ = true;
  // Make the rename durable. Some filesystems cannot fsync a directory (EINVAL): the data are
  // safe anyway, only the name might be lost in a power cut, so that is not an error.
  int dfd = ::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    int rc = ::fsync(dfd);
    int err = errno;
    ::close(dfd);
    if (rc != 0 && err != EINVAL && err != EROFS)
      throw Error("wrote ", path_, " but cannot fsync its directory: ", os_reason(err),
                  Hint("the new file is in place but may not survive a power failure"));
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFileWriter w(path);
  w.write(bytes);
  w.commit();
}

bool paths_overlap(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec1, ec2;
  const fs::path pa = fs::weakly_canonical(fs::absolute(a), ec1), pb = fs::weakly_canonical(fs::absolute(b), ec2);
  if (ec1 || ec2) return a == b;
  // Component-wise prefix: /x/run is inside /x, /x/runs is not inside /x/run.
  auto inside = [](const fs::path& outer, const fs::path& inner) {
    auto o = outer.begin(), i = inner.begin();
    for (; o != outer.end() && i != inner.end(); ++o, ++i) {
      if (o->empty()) continue;  // a trailing separator's empty component
      if (*o != *i) return false;
    }
    return o == outer.end() || (std::next(o) == outer.end() && o->empty());
  };
  return inside(pa, pb) || inside(pb, pa);
}

std::vector<std::string> directory_entries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace unmask::io
