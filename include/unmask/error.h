// unmask/error.h: the one exception type of the library.
//
// Every error says what went wrong, where (file, tensor, byte offset, line) and how to fix
// it (a HINT). Library code throws; only main() turns an Error into a one-line message and a
// non-zero exit. Destructors never throw.
//
//   UNMASK_CHECK(x.ndim() == 2, "layernorm: x must be 2-D, got ", x.describe());
//   throw Error("safetensors: header length ", n, " runs past the end of ", path,
//               Hint("the file is truncated; download or save it again"));
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace unmask {

/// A fix-it suggestion appended to an error message as "(hint: ...)".
struct Hint {
  std::string text;
  explicit Hint(std::string t) : text(std::move(t)) {}
};

namespace detail {
inline void append(std::ostringstream& os, const Hint& h) { os << " (hint: " << h.text << ")"; }
template <typename T> void append(std::ostringstream& os, const T& v) { os << v; }
template <typename... Args> std::string concat(const Args&... args) {
  std::ostringstream os;
  (append(os, args), ...);
  return os.str();
}
}  // namespace detail

/// The library's exception. The message is complete and user-facing.
class Error : public std::runtime_error {
 public:
  template <typename... Args>
  explicit Error(const Args&... args) : std::runtime_error(detail::concat(args...)) {}
};

/// Thrown by an op front-end for a (device, dtype) pair no backend implements.
class Unsupported : public Error {
 public:
  template <typename... Args>
  explicit Unsupported(const Args&... args) : Error(args...) {}
};

}  // namespace unmask

/// Validate a precondition at an API boundary; the message parts are streamed together.
#define UNMASK_CHECK(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) throw ::unmask::Error(__VA_ARGS__, " [check `" #cond "` at ", __FILE__, \
                                       ":", __LINE__, "]");                              \
  } while (0)
