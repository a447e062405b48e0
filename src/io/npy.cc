// io/npy.cc: NumPy .npy reader and writer (the format of numpy/lib/format.py, written from its
// published description).
//
// Layout: "\x93NUMPY", major, minor, header length (u16 LE for v1, u32 LE for v2/v3), then a
// Python dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and ended by '\n' so the data start on a 64-byte boundary, then the raw
// C-order data.
#include "io/npy.h"

#include <bit>
#include <cstring>
#include <string_view>
#include <vector>

#include "io/file.h"
#include "unmask/error.h"

namespace unmask::io {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes (+ the implicit NUL, not written)
constexpr size_t kAlign = 64;           // NumPy's ARRAY_ALIGN

// The NumPy type string for each dtype we write ('|' = byte order not applicable).
const char* descr_of(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::u8: return "|u1";
    case DType::boolean: return "|b1";
    case DType::f16: return "<f2";
    case DType::bf16: return nullptr;  // NumPy has no bfloat16
  }
  return nullptr;
}

// A tiny parser for the header dict. NumPy writes it with repr(), so it only ever contains
// quoted strings, True/False, and tuples of non-negative integers; anything else is an error.
class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& path) : s_(s), path_(path) {}

  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  std::string str() {
    ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) fail("expected a quoted string");
    char q = s_[i_++];
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] != q) ++i_;
    if (i_ >= s_.size()) fail("unterminated string");
    return std::string(s_.substr(start, i_++ - start));
  }
  bool boolean() {
    ws();
    for (auto [word, v] : {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}})
      if (s_.substr(i_, word.size()) == word) return i_ += word.size(), v;
    fail("expected True or False");
    return false;
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> dims;
    while (!eat(')')) {
      ws();
      if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') fail("expected a non-negative integer in the shape");
      int64_t v = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        if (v > (INT64_MAX - 9) / 10) fail("shape entry too large");
        v = v * 10 + (s_[i_++] - '0');
      }
      if (s_.substr(i_, 1) == "L") ++i_;  // Python 2 long suffix, seen in very old files
      dims.push_back(v);
      if (!eat(',')) {
        expect(')');
        break;
      }
    }
    return dims;
  }
  bool at_end() {
    ws();
    return i_ == s_.size();
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw Error("npy: ", path_, ": cannot parse the header at character ", i_, " (", why, "): ", s_,
                Hint("the file is corrupt or not written by numpy.save"));
  }

 private:
  std::string_view s_;
  const std::string& path_;
  size_t i_ = 0;
};

}  // namespace

void write_npy(const std::string& path, const Tensor& t) {
  if (!t.defined()) throw Error("write_npy ", path, ": the tensor is undefined (default-constructed)");
  if (t.device() != Device::cpu) throw Error("write_npy ", path, ": tensor is ", t.describe(), Hint("copy it to the CPU first"));
  const char* descr = descr_of(t.dtype());
  if (!descr)
    throw Error("write_npy ", path, ": NumPy has no ", dtype_name(t.dtype()), " type (tensor ", t.describe(), ")",
                Hint("convert the tensor to f32 before saving"));
  std::string shape = "(";
  for (int i = 0; i < t.ndim(); ++i) shape += std::to_string(t.size(i)) + (t.ndim() == 1 ? "," : i + 1 < t.ndim() ? ", " : "");
  shape += ")";  // Python tuple repr: (), (3,), (2, 3)
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad so that magic(6) + version(2) + length(2) + header + '\n' is a multiple of 64.
  const size_t prefix = 10;
  size_t total = prefix + header.size() + 1;
  header.append((kAlign - total % kAlign) % kAlign, ' ');
  header += '\n';
  if (header.size() > 65535) throw Error("write_npy ", path, ": header too long");  // impossible with <= 6 dims

  std::string head(kMagic, 6);
  head += char(1);  // version 1.0
  head += char(0);
  head += char(header.size() & 0xff);
  head += char(header.size() >> 8);
  head += header;

  AtomicFileWriter w(path);
  w.write(head);
  if (t.numel() > 0) {
    if (t.is_contiguous()) {
      w.write(t.raw(), t.nbytes());
    } else {
      Tensor c = t.contiguous();
      w.write(c.raw(), c.nbytes());
    }
  }
  w.commit();
}

Tensor read_npy(const std::string& path) {
  const std::string bytes = read_file(path);
  const std::string where = "npy: " + path;
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
    throw Error(where, " is not a .npy file (it does not start with \\x93NUMPY)",
                Hint("write it with numpy.save; .npz archives must be unpacked first"));
  const int major = uint8_t(bytes[6]), minor = uint8_t(bytes[7]);
  size_t hlen = 0, hstart = 0;
  if (major == 1) {
    hlen = uint8_t(bytes[8]) | size_t(uint8_t(bytes[9])) << 8;
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw Error(where, " is truncated inside its header", Hint("save it again"));
    for (int i = 3; i >= 0; --i) hlen = (hlen << 8) | uint8_t(bytes[8 + i]);
    hstart = 12;
  } else {
    throw Error(where, " has format version ", major, ".", minor, "; unmask reads versions 1, 2 and 3",
                Hint("save it with numpy.save, which writes version 1.0 when it can"));
  }
  if (hlen > bytes.size() - hstart)
    throw Error(where, ": header length ", hlen, " runs past the end of the file (", bytes.size(), " bytes)",
                Hint("the file is truncated; save it again"));
  const std::string_view header(bytes.data() + hstart, hlen);

  // {'descr': ..., 'fortran_order': ..., 'shape': (...), } in any key order.
  HeaderParser p(header, path);
  std::string descr;
  bool fortran = false, have_descr = false, have_order = false, have_shape = false;
  std::vector<int64_t> dims;
  p.expect('{');
  while (!p.eat('}')) {
    std::string key = p.str();
    p.expect(':');
    if (key == "descr") {
      p.ws();
      if (p.eat('[')) p.fail("structured dtypes (a list descr) are not supported");
      descr = p.str(), have_descr = true;
    } else if (key == "fortran_order") {
      fortran = p.boolean(), have_order = true;
    } else if (key == "shape") {
      dims = p.tuple(), have_shape = true;
    } else {
      p.fail("unexpected key '" + key + "'");
    }
    if (!p.eat(',')) {
      p.expect('}');
      break;
    }
  }
  if (!p.at_end()) p.fail("trailing characters after the dict");
  if (!have_descr || !have_order || !have_shape)
    p.fail(std::string("missing key '") + (!have_descr ? "descr" : !have_order ? "fortran_order" : "shape") + "'");

  if (fortran)
    throw Error(where, " is stored in Fortran (column-major) order; unmask reads C order only",
                Hint("save np.ascontiguousarray(a) instead of a"));
  DType dtype;
  if (descr == "<f4") dtype = DType::f32;
  else if (descr == "<f8") dtype = DType::f64;
  else if (descr == "<i4") dtype = DType::i32;
  else if (descr == "<i8") dtype = DType::i64;
  else if (descr == "|u1" || descr == "<u1") dtype = DType::u8;
  else if (descr == "|b1" || descr == "<b1") dtype = DType::boolean;
  else if (descr == "<f2") dtype = DType::f16;
  else if (!descr.empty() && descr[0] == '>')
    throw Error(where, " holds big-endian data ('", descr, "'); unmask reads little-endian only",
                Hint("save a.astype(a.dtype.newbyteorder('<')) instead"));
  else
    throw Error(where, " has dtype '", descr, "', which unmask does not read (supported: <f4 <f8 <i4 <i8 |u1 |b1 <f2)",
                Hint("convert it first, e.g. np.save(path, a.astype(np.float32))"));
  if (dims.size() > size_t(kMaxDims))
    throw Error(where, " has ", dims.size(), " dimensions; unmask tensors have at most ", kMaxDims,
                Hint("reshape the array before saving"));

  uint64_t need = dtype_size(dtype);
  for (int64_t d : dims)
    if (__builtin_mul_overflow(need, uint64_t(d), &need)) throw Error(where, ": shape overflows 64-bit byte counts");
  const size_t have = bytes.size() - hstart - hlen;
  if (have != need)
    throw Error(where, ": ", descr, " shape ", Shape(dims).str(), " needs ", need, " data bytes but the file has ", have,
                Hint(have < need ? "the file is truncated; save it again" : "the file has trailing bytes; save it again with numpy.save"));
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data() + hstart + hlen);
  if (dtype == DType::boolean)  // a C++ bool must hold 0 or 1 (NumPy's always do)
    for (size_t i = 0; i < need; ++i)
      if (data[i] > 1)
        throw Error(where, ": bool element ", i, " is byte ", int(data[i]), ", not 0 or 1",
                    Hint("the file is corrupt; save it again"));
  Tensor t = Tensor::empty(Shape(dims), dtype);
  if (need) std::memcpy(t.raw(), data, need);
  return t;
}

}  // namespace unmask::io
