// io/torch_pickle.cc: the torch.save reader (see torch_pickle.h): a zip directory reader for
// STORED entries, a minimal pickle machine over an arena of nodes (no ownership cycles, so a
// self-referencing pickle cannot leak), and the tensor materialisation from storage entries.
#include "io/torch_pickle.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "core/half.h"
#include "unmask/error.h"

namespace unmask::io {
namespace {

constexpr const char* kResaveHint =
    "load it in Python and save it again with torch >= 1.6 (the default zip format): "
    "torch.save(torch.load(path, map_location='cpu'), new_path)";

// ---- little-endian reads with bounds checks ------------------------------------------------

struct Bytes {
  const uint8_t* p = nullptr;
  size_t size = 0;
  const std::string* where = nullptr;

  void need(uint64_t off, uint64_t n, const char* what) const {
    if (off > size || n > size - off)
      throw Error(*where, ": ", what, " at byte ", off, " (", n, " bytes) runs past the end of the file (", size,
                  " bytes)",
                  Hint("the file is truncated or is not a torch.save checkpoint; save or download it again"));
  }
  uint64_t le(uint64_t off, int n, const char* what) const {
    need(off, uint64_t(n), what);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[off + uint64_t(i)];
    return v;
  }
};

// ---- zip directory ---------------------------------------------------------------------------

struct ZipEntry {
  uint64_t data = 0, size = 0;  // absolute offset of the stored bytes, their count
  uint16_t method = 0, flags = 0;
  uint64_t local = 0;  // local header offset (data is resolved lazily)
  uint64_t csize = 0;
};

constexpr uint32_t kEocdSig = 0x06054b50, kEocd64Sig = 0x06064b50, kLocatorSig = 0x07064b50;
constexpr uint32_t kCentralSig = 0x02014b50, kLocalSig = 0x04034b50;

std::map<std::string, ZipEntry> read_zip_directory(const Bytes& b) {
  const std::string& where = *b.where;
  if (b.size < 22)
    throw Error(where, ": ", b.size, " bytes is too short for a zip archive",
                Hint("the file is truncated; save or download it again"));
  // The end-of-central-directory record: 22 bytes + a comment of up to 65535 bytes at the end.
  uint64_t eocd = UINT64_MAX;
  const uint64_t lowest = b.size > 22 + 65535 ? b.size - 22 - 65535 : 0;
  for (uint64_t pos = b.size - 22 + 1; pos-- > lowest;)
    if (b.le(pos, 4, "zip end record") == kEocdSig) {
      eocd = pos;
      break;
    }
  if (eocd == UINT64_MAX)
    throw Error(where, ": no zip end-of-central-directory record",
                Hint("the zip archive is truncated (an interrupted save or download); save it again"));
  uint64_t entries = b.le(eocd + 10, 2, "zip end record");
  uint64_t cd_size = b.le(eocd + 12, 4, "zip end record");
  uint64_t cd_off = b.le(eocd + 16, 4, "zip end record");
  if (entries == 0xffff || cd_size == 0xffffffff || cd_off == 0xffffffff) {
    // ZIP64: a locator right before the end record points at the 64-bit end record.
    if (eocd < 20 || b.le(eocd - 20, 4, "zip64 locator") != kLocatorSig)
      throw Error(where, ": the zip end record asks for ZIP64 but has no ZIP64 locator", Hint(kResaveHint));
    const uint64_t e64 = b.le(eocd - 20 + 8, 8, "zip64 locator");
    if (b.le(e64, 4, "zip64 end record") != kEocd64Sig)
      throw Error(where, ": no ZIP64 end record at byte ", e64, Hint("the file is damaged; save it again"));
    entries = b.le(e64 + 32, 8, "zip64 end record");
    cd_size = b.le(e64 + 40, 8, "zip64 end record");
    cd_off = b.le(e64 + 48, 8, "zip64 end record");
  }
  b.need(cd_off, cd_size, "zip central directory");
  if (entries > cd_size / 46)
    throw Error(where, ": the zip directory claims ", entries, " entries in ", cd_size, " bytes",
                Hint("the file is damaged; save it again"));
  std::map<std::string, ZipEntry> out;
  uint64_t pos = cd_off;
  for (uint64_t i = 0; i < entries; ++i) {
    if (b.le(pos, 4, "zip directory entry") != kCentralSig)
      throw Error(where, ": zip directory entry ", i, " at byte ", pos, " has a bad signature",
                  Hint("the file is damaged; save it again"));
    ZipEntry e;
    e.flags = uint16_t(b.le(pos + 8, 2, "zip directory entry"));
    e.method = uint16_t(b.le(pos + 10, 2, "zip directory entry"));
    e.csize = b.le(pos + 20, 4, "zip directory entry");
    e.size = b.le(pos + 24, 4, "zip directory entry");
    const uint64_t name_len = b.le(pos + 28, 2, "zip directory entry");
    const uint64_t extra_len = b.le(pos + 30, 2, "zip directory entry");
    const uint64_t comment_len = b.le(pos + 32, 2, "zip directory entry");
    e.local = b.le(pos + 42, 4, "zip directory entry");
    b.need(pos + 46, name_len + extra_len + comment_len, "zip directory entry name");
    std::string name(reinterpret_cast<const char*>(b.p + pos + 46), name_len);
    // ZIP64 extended information (id 1): the 64-bit values of the fields that read 0xffffffff.
    uint64_t x = pos + 46 + name_len;
    const uint64_t x_end = x + extra_len;
    while (x + 4 <= x_end) {
      const uint64_t id = b.le(x, 2, "zip extra field"), len = b.le(x + 2, 2, "zip extra field");
      if (x + 4 + len > x_end) break;
      if (id == 1) {
        uint64_t f = x + 4;
        auto take = [&](uint64_t& v) {
          if (f + 8 <= x + 4 + len) v = b.le(f, 8, "zip64 extra field"), f += 8;
        };
        if (e.size == 0xffffffff) take(e.size);
        if (e.csize == 0xffffffff) take(e.csize);
        if (e.local == 0xffffffff) take(e.local);
      }
      x += 4 + len;
    }
    out[name] = e;  // a duplicate name keeps the last, as zip readers do
    pos += 46 + name_len + extra_len + comment_len;
  }
  return out;
}

// The bytes of one entry; the stored (uncompressed) method only.
std::pair<const uint8_t*, uint64_t> entry_bytes(const Bytes& b, const std::string& name, const ZipEntry& e) {
  const std::string& where = *b.where;
  if (e.flags & 1)
    throw Error(where, ": zip entry ", name, " is encrypted",
                Hint("torch.save never encrypts; " + std::string(kResaveHint)));
  if (e.method != 0)
    throw Error(where, ": zip entry ", name, " is compressed (method ", e.method, e.method == 8 ? ", deflate" : "",
                "); torch.save stores entries uncompressed",
                Hint("the archive was re-zipped by another tool; " + std::string(kResaveHint)));
  if (e.csize != e.size)
    throw Error(where, ": zip entry ", name, " is stored but its sizes differ (", e.csize, " vs ", e.size, ")",
                Hint("the file is damaged; save it again"));
  if (b.le(e.local, 4, "zip local header") != kLocalSig)
    throw Error(where, ": zip entry ", name, " has no local header at byte ", e.local,
                Hint("the file is damaged; save it again"));
  const uint64_t data =
      e.local + 30 + b.le(e.local + 26, 2, "zip local header") + b.le(e.local + 28, 2, "zip local header");
  b.need(data, e.size, ("zip entry " + name).c_str());
  return {b.p + data, e.size};
}

// ---- the pickle machine --------------------------------------------------------------------

enum class Kind : uint8_t {
  none,
  boolean,
  integer,
  floating,
  string,
  bytes,
  tuple,
  list,
  dict,
  global,
  object,
  storage,
  tensor
};

struct Node {
  Kind kind = Kind::none;
  int64_t i = 0;  // integer / boolean; storage: element count
  double f = 0;
  std::string s;               // string / bytes; global / object: the class; storage: key
  std::vector<int32_t> items;  // tuple / list; dict: key, value, key, value, ...
  int32_t ref = -1;            // tensor: its storage node
  bool supported = true;       // storage: a dtype this reader converts
  DType dtype = DType::f32;    // storage
  int64_t offset = 0;          // tensor: storage offset (elements)
  std::vector<int64_t> sizes, strides;
};

class Machine {
 public:
  Machine(const uint8_t* p, size_t n, const std::string& where) : p_(p), n_(n), where_(where) {}

  std::vector<Node> nodes;

  /// Bytes read so far (the legacy format holds several pickles back to back).
  size_t consumed() const { return pos_; }

  int32_t run() {
    while (true) {
      const size_t at = pos_;
      const uint8_t op = u8();
      switch (op) {
        case 0x80: {  // PROTO
          const uint8_t v = u8();
          if (v > 5) fail(at, "pickle protocol " + std::to_string(v) + " is newer than 5");
          break;
        }
        case 0x95:
          take(8);
          break;   // FRAME (protocol 4): a length hint only
        case '.':  // STOP
          if (stack_.size() != 1 || !marks_.empty())
            fail(at, "STOP with " + std::to_string(stack_.size()) + " values on the stack");
          return stack_.back();
        case '(':
          marks_.push_back(stack_.size());
          break;  // MARK
        case '}':
          push(make(Kind::dict));
          break;
        case ']':
          push(make(Kind::list));
          break;
        case ')':
          push(make(Kind::tuple));
          break;
        case 'N':
          push(make(Kind::none));
          break;
        case 0x88:
        case 0x89: {  // NEWTRUE / NEWFALSE
          const int32_t id = make(Kind::boolean);
          nodes[size_t(id)].i = op == 0x88;
          push(id);
          break;
        }
        case 'J':
          push_int(int64_t(int32_t(uint32_t(le(4)))));
          break;  // BININT
        case 'K':
          push_int(int64_t(le(1)));
          break;  // BININT1
        case 'M':
          push_int(int64_t(le(2)));
          break;  // BININT2
        case 0x8a:
        case 0x8b: {  // LONG1 / LONG4
          const uint64_t len = le(op == 0x8a ? 1 : 4);
          const uint8_t* d = take(len);
          if (len > 8) {  // far beyond int64: kept as an opaque value
            const int32_t id = make(Kind::object);
            nodes[size_t(id)].s = "int (" + std::to_string(len) + "-byte)";
            push(id);
            break;
          }
          uint64_t v = 0;
          for (uint64_t k = len; k-- > 0;) v = (v << 8) | d[k];
          if (len > 0 && len < 8 && (d[len - 1] & 0x80)) v |= ~uint64_t(0) << (8 * len);  // sign-extend
          push_int(int64_t(v));
          break;
        }
        case 'G': {  // BINFLOAT: big-endian double
          const uint8_t* d = take(8);
          uint64_t v = 0;
          for (int k = 0; k < 8; ++k) v = (v << 8) | d[k];
          const int32_t id = make(Kind::floating);
          std::memcpy(&nodes[size_t(id)].f, &v, 8);
          push(id);
          break;
        }
        case 'X':
          push_text(Kind::string, le(4));
          break;  // BINUNICODE
        case 0x8c:
          push_text(Kind::string, le(1));
          break;  // SHORT_BINUNICODE
        case 0x8d:
          push_text(Kind::string, le(8));
          break;  // BINUNICODE8
        case 'U':
          push_text(Kind::string, le(1));
          break;  // SHORT_BINSTRING
        case 'T':
          push_text(Kind::string, le(4));
          break;  // BINSTRING
        case 'B':
          push_text(Kind::bytes, le(4));
          break;  // BINBYTES
        case 'C':
          push_text(Kind::bytes, le(1));
          break;     // SHORT_BINBYTES
        case 'c': {  // GLOBAL "module\nname\n"
          const std::string module = line(at), name = line(at);
          const int32_t id = make(Kind::global);
          nodes[size_t(id)].s = module + "." + name;
          push(id);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const int32_t name = pop(at), module = pop(at);
          if (kind(name) != Kind::string || kind(module) != Kind::string) fail(at, "STACK_GLOBAL needs two strings");
          const int32_t id = make(Kind::global);
          nodes[size_t(id)].s = nodes[size_t(module)].s + "." + nodes[size_t(name)].s;
          push(id);
          break;
        }
        case 't': {  // TUPLE
          const int32_t id = make(Kind::tuple);
          nodes[size_t(id)].items = pop_to_mark(at);
          push(id);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const int count = op - 0x84;
          std::vector<int32_t> items(static_cast<size_t>(count), 0);
          for (int k = count; k-- > 0;) items[size_t(k)] = pop(at);
          const int32_t id = make(Kind::tuple);
          nodes[size_t(id)].items = std::move(items);
          push(id);
          break;
        }
        case 'q':
          memo_[uint32_t(le(1))] = top(at);
          break;  // BINPUT
        case 'r':
          memo_[uint32_t(le(4))] = top(at);
          break;  // LONG_BINPUT
        case 0x94:
          memo_[uint32_t(memo_.size())] = top(at);
          break;  // MEMOIZE
        case 'h':
          push(get(at, uint32_t(le(1))));
          break;  // BINGET
        case 'j':
          push(get(at, uint32_t(le(4))));
          break;  // LONG_BINGET
        case '0':
          pop(at);
          break;  // POP
        case '1':
          pop_to_mark(at);
          break;  // POP_MARK
        case '2':
          push(top(at));
          break;     // DUP
        case 's': {  // SETITEM
          const int32_t v = pop(at), k = pop(at);
          dict_add(at, top(at), {k, v});
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<int32_t> kv = pop_to_mark(at);
          if (kv.size() % 2) fail(at, "SETITEMS with an odd number of values");
          dict_add(at, top(at), kv);
          break;
        }
        case 'a': {  // APPEND
          const int32_t v = pop(at);
          list_add(at, top(at), {v});
          break;
        }
        case 'e': {  // APPENDS
          std::vector<int32_t> v = pop_to_mark(at);
          list_add(at, top(at), v);
          break;
        }
        case 'Q':
          push(persistent(pop(at)));
          break;     // BINPERSID
        case 'R': {  // REDUCE
          const int32_t args = pop(at), callable = pop(at);
          push(reduce(at, callable, args));
          break;
        }
        case 0x81: {  // NEWOBJ: cls.__new__(cls, *args), an opaque object
          const int32_t args = pop(at), cls = pop(at);
          const int32_t id = make(Kind::object);
          nodes[size_t(id)].s = kind(cls) == Kind::global ? nodes[size_t(cls)].s : "object";
          nodes[size_t(id)].items = {args};
          push(id);
          break;
        }
        case 'b': {  // BUILD: obj.__setstate__(state); kept for objects, ignored for dicts / tensors
          const int32_t state = pop(at), obj = top(at);
          if (kind(obj) == Kind::object) nodes[size_t(obj)].ref = state;
          break;
        }
        default: {
          std::ostringstream os;
          os << "unsupported pickle opcode 0x" << std::hex << int(op);
          if (op >= 0x20 && op < 0x7f) os << " ('" << char(op) << "')";
          fail(at, os.str() + "; torch.save of a state dict never emits it");
        }
      }
    }
  }

  Kind kind(int32_t id) const { return nodes[size_t(id)].kind; }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw Error(where_, ": data.pkl byte ", at, ": ", what,
                Hint("the checkpoint is damaged or was not written by torch.save; save it again"));
  }
  const uint8_t* take(uint64_t n) {
    if (n > n_ - pos_)
      fail(pos_, "a value of " + std::to_string(n) + " bytes runs past the end of data.pkl (" + std::to_string(n_) +
                     " bytes)");
    const uint8_t* d = p_ + pos_;
    pos_ += size_t(n);
    return d;
  }
  uint8_t u8() { return *take(1); }
  uint64_t le(int n) {
    const uint8_t* d = take(uint64_t(n));
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = (v << 8) | d[k];
    return v;
  }
  std::string line(size_t at) {
    const size_t start = pos_;
    while (pos_ < n_ && p_[pos_] != '\n') ++pos_;
    if (pos_ >= n_) fail(at, "GLOBAL without a newline");
    std::string s(reinterpret_cast<const char*>(p_ + start), pos_ - start);
    ++pos_;
    return s;
  }
  int32_t make(Kind k) {
    if (nodes.size() >= size_t(std::numeric_limits<int32_t>::max())) fail(pos_, "too many values");
    nodes.emplace_back();
    nodes.back().kind = k;
    return int32_t(nodes.size() - 1);
  }
  void push(int32_t id) { stack_.push_back(id); }
  void push_int(int64_t v) {
    const int32_t id = make(Kind::integer);
    nodes[size_t(id)].i = v;
    push(id);
  }
  void push_text(Kind k, uint64_t len) {
    const uint8_t* d = take(len);
    const int32_t id = make(k);
    nodes[size_t(id)].s.assign(reinterpret_cast<const char*>(d), size_t(len));
    push(id);
  }
  int32_t top(size_t at) {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) fail(at, "the stack is empty");
    return stack_.back();
  }
  int32_t pop(size_t at) {
    const int32_t v = top(at);
    stack_.pop_back();
    return v;
  }
  std::vector<int32_t> pop_to_mark(size_t at) {
    if (marks_.empty()) fail(at, "no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<int32_t> out(stack_.begin() + std::ptrdiff_t(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  int32_t get(size_t at, uint32_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail(at, "memo key " + std::to_string(key) + " was never stored");
    return it->second;
  }
  void dict_add(size_t at, int32_t target, const std::vector<int32_t>& kv) {
    if (kind(target) == Kind::object) return;  // a user class's __setitem__: not modelled
    if (kind(target) != Kind::dict) fail(at, "SETITEM(S) on a value that is not a dict");
    auto& items = nodes[size_t(target)].items;
    items.insert(items.end(), kv.begin(), kv.end());
  }
  void list_add(size_t at, int32_t target, const std::vector<int32_t>& v) {
    if (kind(target) == Kind::object) return;
    if (kind(target) != Kind::list) fail(at, "APPEND(S) on a value that is not a list");
    auto& items = nodes[size_t(target)].items;
    items.insert(items.end(), v.begin(), v.end());
  }

  // ('storage', torch.FloatStorage, key, location, numel) -> a storage node; the legacy format
  // adds a sixth item, the view metadata (None for whole storages).
  int32_t persistent(int32_t pid) {
    const Node& t = nodes[size_t(pid)];
    const bool storage = t.kind == Kind::tuple && (t.items.size() == 5 || (t.items.size() == 6 && kind(t.items[5]) == Kind::none)) && kind(t.items[0]) == Kind::string &&
                         nodes[size_t(t.items[0])].s == "storage" && kind(t.items[1]) == Kind::global &&
                         kind(t.items[2]) == Kind::string && kind(t.items[4]) == Kind::integer;
    if (!storage) {
      const int32_t id = make(Kind::object);
      nodes[size_t(id)].s = "persistent id";
      return id;
    }
    const int32_t cls = t.items[1];
    const std::string type = nodes[size_t(cls)].s, key = nodes[size_t(t.items[2])].s;
    const int64_t numel = nodes[size_t(t.items[4])].i;
    const int32_t id = make(Kind::storage);  // invalidates `t`
    Node& s = nodes[size_t(id)];
    s.s = key;
    s.i = numel;
    static const std::pair<std::string_view, DType> kTypes[] = {
        {"torch.FloatStorage", DType::f32},     {"torch.HalfStorage", DType::f16},
        {"torch.BFloat16Storage", DType::bf16}, {"torch.DoubleStorage", DType::f64},
        {"torch.LongStorage", DType::i64},      {"torch.IntStorage", DType::i32},
        {"torch.ByteStorage", DType::u8},       {"torch.BoolStorage", DType::boolean}};
    s.supported = false;
    for (const auto& [name, dt] : kTypes)
      if (type == name) s.supported = true, s.dtype = dt;
    if (!s.supported) s.items = {cls};  // the class, for the message
    return id;
  }

  std::vector<int64_t> int_tuple(size_t at, int32_t id, const char* what) {
    if (kind(id) != Kind::tuple && kind(id) != Kind::list) fail(at, std::string("tensor ") + what + " is not a tuple");
    std::vector<int64_t> out;
    for (int32_t e : nodes[size_t(id)].items) {
      if (kind(e) != Kind::integer) fail(at, std::string("tensor ") + what + " holds a non-integer");
      out.push_back(nodes[size_t(e)].i);
    }
    return out;
  }

  int32_t reduce(size_t at, int32_t callable, int32_t args) {
    const std::string fn = kind(callable) == Kind::global ? nodes[size_t(callable)].s : "";
    const std::vector<int32_t> a = kind(args) == Kind::tuple ? nodes[size_t(args)].items : std::vector<int32_t>{};
    if (fn == "collections.OrderedDict" && a.empty()) return make(Kind::dict);
    if (fn == "torch._utils._rebuild_tensor_v2" || fn == "torch._utils._rebuild_tensor") {
      // (storage, storage_offset, size, stride[, requires_grad, backward_hooks[, metadata]])
      if (a.size() < 4) fail(at, fn + " needs at least 4 arguments, got " + std::to_string(a.size()));
      if (kind(a[0]) != Kind::storage) fail(at, fn + ": the first argument is not a storage (persistent id)");
      if (kind(a[1]) != Kind::integer) fail(at, fn + ": the storage offset is not an integer");
      const int32_t id = make(Kind::tensor);
      Node& t = nodes[size_t(id)];
      t.ref = a[0];
      t.offset = nodes[size_t(a[1])].i;
      t.sizes = int_tuple(at, a[2], "size");
      t.strides = int_tuple(at, a[3], "stride");
      if (t.sizes.size() != t.strides.size())
        fail(at, "tensor size and stride lengths differ (" + std::to_string(t.sizes.size()) + " vs " +
                     std::to_string(t.strides.size()) + ")");
      return id;
    }
    if (fn == "torch._utils._rebuild_parameter" || fn == "torch._utils._rebuild_parameter_with_state") {
      if (a.empty() || kind(a[0]) != Kind::tensor) fail(at, fn + ": the first argument is not a tensor");
      return a[0];  // a Parameter is its data
    }
    const int32_t id = make(Kind::object);
    nodes[size_t(id)].s = fn.empty() ? "object" : fn;
    nodes[size_t(id)].items = {args};
    return id;
  }

  const uint8_t* p_;
  size_t n_, pos_ = 0;
  const std::string& where_;
  std::vector<int32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, int32_t> memo_;
};

// ---- tensors ---------------------------------------------------------------------------------

struct Reader {
  Bytes bytes;
  std::shared_ptr<const uint8_t> keepalive;
  std::map<std::string, ZipEntry> entries;
  // The legacy format: storage key -> its bytes in the file (after the pickles).
  std::map<std::string, std::pair<const uint8_t*, uint64_t>> legacy;
  std::string prefix;  // "<archive>/"
  Machine* vm = nullptr;
  TorchCheckpoint* out = nullptr;
  std::vector<char> visited;

  std::string path_str(const std::vector<std::string>& path) const {
    std::string s;
    for (const auto& p : path) s += (s.empty() ? "" : "/") + p;
    return s.empty() ? "<root>" : s;
  }

  Tensor materialize(const Node& t, const std::string& name, DType* stored) {
    const std::string& where = *bytes.where;
    const Node& s = vm->nodes[size_t(t.ref)];
    *stored = s.dtype;
    const std::string entry_name = legacy.empty() ? prefix + "data/" + s.s : "storage " + s.s;
    const uint8_t* data = nullptr;
    uint64_t nbytes = 0;
    if (!legacy.empty()) {
      auto it = legacy.find(s.s);
      if (it == legacy.end())
        throw Error(where, ": tensor ", name, " uses storage '", s.s, "' but the file's storage list lacks it",
                    Hint("the file is truncated or damaged; save it again"));
      std::tie(data, nbytes) = it->second;
    } else {
      auto it = entries.find(entry_name);
      if (it == entries.end())
        throw Error(where, ": tensor ", name, " uses storage '", s.s, "' but the archive has no entry ", entry_name,
                    Hint("the file is truncated or damaged; save it again"));
      std::tie(data, nbytes) = entry_bytes(bytes, entry_name, it->second);
    }
    const uint64_t es = dtype_size(s.dtype);
    if (s.i < 0 || uint64_t(s.i) > nbytes / es)
      throw Error(where, ": storage ", entry_name, " should hold ", s.i, " ", dtype_name(s.dtype), " elements but has ",
                  nbytes, " bytes", Hint("the file is truncated or damaged; save it again"));
    const int nd = int(t.sizes.size());
    if (nd > kMaxDims)
      throw Error(where, ": tensor ", name, " has ", nd, " dimensions; at most ", kMaxDims, " are supported");
    // The largest element index the view touches must lie inside the storage.
    uint64_t numel = 1, last = 0;
    for (int d = 0; d < nd; ++d) {
      const int64_t n = t.sizes[size_t(d)], st = t.strides[size_t(d)];
      if (n < 0 || st < 0)
        throw Error(where, ": tensor ", name, " has a negative size or stride (size ", n, ", stride ", st, ")");
      if (n > 0 && numel > 0 && uint64_t(n) > (uint64_t(1) << 62) / numel)
        throw Error(where, ": tensor ", name, " has too many elements");
      numel *= uint64_t(n);
      if (n > 1 && uint64_t(st) > (UINT64_MAX / 4 - last) / uint64_t(n - 1))
        throw Error(where, ": tensor ", name, " has an implausible stride ", st, " for size ", n);
      if (n > 0) last += uint64_t(n - 1) * uint64_t(st);
    }
    // A view never has more elements than its storage (torch saves expanded stride-0 views
    // with their small storage; they are not used in model state dicts).
    if (numel > uint64_t(s.i))
      throw Error(where, ": tensor ", name, " has ", numel, " elements but its storage only ", s.i,
                  Hint("expanded (stride-0) views are not supported; save t.contiguous() instead"));
    if (t.offset < 0) throw Error(where, ": tensor ", name, " has a negative storage offset ", t.offset);
    if (numel > 0 && uint64_t(t.offset) + last >= uint64_t(s.i))
      throw Error(where, ": tensor ", name, " (offset ", t.offset, ", last element ", uint64_t(t.offset) + last,
                  ") reaches past its storage of ", s.i, " elements",
                  Hint("the file is damaged or was not written by torch.save"));
    Shape shape(t.sizes);
    const bool floating =
        s.dtype == DType::f32 || s.dtype == DType::f16 || s.dtype == DType::bf16 || s.dtype == DType::f64;
    const DType out_dt = floating ? DType::f32 : s.dtype;
    bool contiguous = true;
    {
      int64_t expect = 1;
      for (int d = nd - 1; d >= 0; --d) {
        if (t.sizes[size_t(d)] != 1 && t.strides[size_t(d)] != expect) contiguous = false;
        expect *= t.sizes[size_t(d)];
      }
    }
    const uint8_t* base = data + uint64_t(t.offset) * es;
    if (numel > 0 && contiguous && s.dtype == DType::f32 && reinterpret_cast<uintptr_t>(base) % 4 == 0)
      return Tensor::from_blob(const_cast<uint8_t*>(base), shape, DType::f32, Device::cpu,
                               std::const_pointer_cast<uint8_t>(keepalive));
    Tensor result = Tensor::empty(shape, out_dt);
    auto* dst = static_cast<uint8_t*>(result.raw());
    std::vector<int64_t> idx(size_t(nd), 0);
    for (uint64_t k = 0; k < numel; ++k) {
      uint64_t e = 0;
      for (int d = 0; d < nd; ++d) e += uint64_t(idx[size_t(d)]) * uint64_t(t.strides[size_t(d)]);
      const uint8_t* src = base + e * es;
      if (!floating) {
        std::memcpy(dst + k * es, src, es);
      } else {
        float v = 0;
        if (s.dtype == DType::f32) {
          std::memcpy(&v, src, 4);
        } else if (s.dtype == DType::f64) {
          double x;
          std::memcpy(&x, src, 8);
          v = float(x);
        } else {
          uint16_t h;
          std::memcpy(&h, src, 2);
          v = s.dtype == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
        std::memcpy(dst + k * 4, &v, 4);
      }
      for (int d = nd - 1; d >= 0; --d) {
        if (++idx[size_t(d)] < t.sizes[size_t(d)]) break;
        idx[size_t(d)] = 0;
      }
    }
    return result;
  }

  std::string summary(int32_t id) const {
    const Node& n = vm->nodes[size_t(id)];
    switch (n.kind) {
      case Kind::none:
        return "None";
      case Kind::boolean:
        return n.i ? "True" : "False";
      case Kind::integer:
        return "int " + std::to_string(n.i);
      case Kind::floating: {
        std::ostringstream os;
        os << "float " << n.f;
        return os.str();
      }
      case Kind::string:
        return "str '" + n.s.substr(0, 40) + (n.s.size() > 40 ? "...'" : "'");
      case Kind::bytes:
        return "bytes (" + std::to_string(n.s.size()) + ")";
      case Kind::tuple:
        return "tuple (" + std::to_string(n.items.size()) + ")";
      case Kind::list:
        return "list (" + std::to_string(n.items.size()) + ")";
      case Kind::dict:
        return "dict (" + std::to_string(n.items.size() / 2) + ")";
      case Kind::global:
        return "class " + n.s;
      case Kind::object:
        return n.s;
      case Kind::storage:
        return "storage '" + n.s + "'";
      case Kind::tensor:
        return "tensor";
    }
    return "?";
  }

  void note(const std::vector<std::string>& path, const std::string& what) {
    if (out->other.size() < 256) out->other.push_back(path_str(path) + ": " + what);
  }

  void walk(int32_t id, std::vector<std::string>& path, int depth) {
    const Node& n = vm->nodes[size_t(id)];
    if (n.kind == Kind::tensor) {
      const Node& s = vm->nodes[size_t(n.ref)];
      if (!s.supported) {
        const int32_t cls = s.items.empty() ? -1 : s.items[0];
        note(path,
             "tensor of unsupported type " + (cls >= 0 ? vm->nodes[size_t(cls)].s : std::string("?")) + " (skipped)");
        return;
      }
      TorchTensor t;
      t.path = path;
      t.tensor = materialize(n, path_str(path), &t.stored);
      out->tensors.push_back(std::move(t));
      return;
    }
    // An object torch.save pickled whole (an nn.Module, as OpenAI's encoder.pkl): its state as
    // BUILD gave it (the module's __dict__: _parameters, _modules, ...) is walked like a dict,
    // never run; its class is only a name.
    const bool module_state = n.kind == Kind::object && n.ref >= 0 && vm->nodes[size_t(n.ref)].kind == Kind::dict;
    const bool container = n.kind == Kind::dict || n.kind == Kind::list || n.kind == Kind::tuple;
    if (module_state) {
      if (visited[size_t(id)]) return;
      visited[size_t(id)] = 1;
      note(path, summary(id));  // the object itself ("args: argparse.Namespace"), then its state
      walk(n.ref, path, depth + 1);
      return;
    }
    if (!container) {
      note(path, summary(id));
      return;
    }
    if (visited[size_t(id)]) {
      note(path, "(a container seen before)");
      return;
    }
    visited[size_t(id)] = 1;
    if (depth >= 32) {
      note(path, "(nested too deeply; skipped)");
      return;
    }
    if (n.kind == Kind::dict) {
      for (size_t k = 0; k + 1 < n.items.size(); k += 2) {
        const Node& key = vm->nodes[size_t(n.items[k])];
        path.push_back(key.kind == Kind::string    ? key.s
                       : key.kind == Kind::integer ? std::to_string(key.i)
                                                   : "<" + summary(n.items[k]) + ">");
        walk(n.items[k + 1], path, depth + 1);
        path.pop_back();
      }
    } else {
      for (size_t k = 0; k < n.items.size(); ++k) {
        path.push_back(std::to_string(k));
        walk(n.items[k], path, depth + 1);
        path.pop_back();
      }
    }
  }
};

}  // namespace

bool looks_like_torch_file(const uint8_t* head, size_t size) {
  if (size >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return true;
  if (size >= 2 && head[0] == 0x80 && head[1] <= 5) return true;             // legacy pickle
  if (size >= 262 && std::memcmp(head + 257, "ustar", 5) == 0) return true;  // legacy tar
  return false;
}

namespace {

// The legacy format (torch < 1.6, or _use_new_zipfile_serialization=False): five pickles back
// to back (the magic number 0x1950a86a20f9469cfc6c, the protocol version, sys_info, the object
// with ('storage', type, key, location, numel, None) persistent ids, the list of storage keys),
// then each listed storage as an int64 element count and its raw little-endian bytes.
TorchCheckpoint parse_legacy(std::shared_ptr<const uint8_t> bytes, size_t size, const std::string& origin,
                             const std::string& where) {
  static const uint8_t kMagic[15] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                     0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e};  // PROTO 2, LONG1 magic, STOP
  const uint8_t* p = bytes.get();
  if (size < sizeof kMagic || std::memcmp(p, kMagic, sizeof kMagic) != 0)
    throw Error(where, " starts with a pickle but not with torch.save's magic number",
                Hint("not a torch.save file (a plain pickle?); save the state_dict with torch.save"));
  size_t at = sizeof kMagic;
  auto run = [&](Machine& m) {
    const int32_t root = m.run();
    at += m.consumed();
    return root;
  };
  Machine version(p + at, size - at, where);
  run(version);
  Machine sys_info(p + at, size - at, where);
  run(sys_info);
  auto vm = std::make_unique<Machine>(p + at, size - at, where);
  const int32_t root = run(*vm);
  Machine keys(p + at, size - at, where);
  const int32_t key_list = run(keys);
  if (keys.nodes[size_t(key_list)].kind != Kind::list)
    throw Error(where, ": the storage key list after the object is not a list", Hint(kResaveHint));
  std::map<std::string, DType> dtype_of;
  for (const Node& n : vm->nodes)
    if (n.kind == Kind::storage) {
      if (!n.supported)
        throw Error(where, ": storage '", n.s, "' has a type this reader does not convert",
                    Hint("save the state_dict with float, half, bfloat16, double, long, int, uint8 or bool tensors"));
      dtype_of[n.s] = n.dtype;
    }
  Reader r;
  r.bytes = Bytes{p, size, &where};
  r.keepalive = bytes;
  for (int32_t k : keys.nodes[size_t(key_list)].items) {
    const Node& key = keys.nodes[size_t(k)];
    if (key.kind != Kind::string) throw Error(where, ": a storage key is not a string", Hint(kResaveHint));
    auto dt = dtype_of.find(key.s);
    if (dt == dtype_of.end())
      throw Error(where, ": the file lists storage '", key.s, "', which no tensor of the object uses", Hint(kResaveHint));
    if (size - at < 8)
      throw Error(where, ": storage '", key.s, "' starts past the end of the file (", size, " bytes)",
                  Hint("the file is truncated; save or download it again"));
    uint64_t numel = 0;
    for (int i = 7; i >= 0; --i) numel = (numel << 8) | p[at + size_t(i)];
    at += 8;
    const uint64_t es = dtype_size(dt->second);
    if (numel > (size - at) / es)
      throw Error(where, ": storage '", key.s, "' holds ", numel, " elements of ", es, " bytes, past the end of the file (",
                  size, " bytes)", Hint("the file is truncated; save or download it again"));
    r.legacy[key.s] = {p + at, numel * es};
    at += size_t(numel * es);
  }
  TorchCheckpoint out;
  out.origin = origin;
  r.vm = vm.get();
  r.out = &out;
  r.visited.assign(vm->nodes.size(), 0);
  std::vector<std::string> path;
  r.walk(root, path, 0);
  return out;
}

}  // namespace

TorchCheckpoint parse_torch_checkpoint(std::shared_ptr<const uint8_t> bytes, size_t size, const std::string& origin) {
  const std::string where = "pytorch checkpoint " + origin;
  const uint8_t* p = bytes.get();
  if (size >= 2 && p[0] == 0x80 && p[1] <= 5) return parse_legacy(std::move(bytes), size, origin, where);
  if (size >= 262 && std::memcmp(p + 257, "ustar", 5) == 0)
    throw Error(where, " is in the oldest (tar) torch.save format, which this reader does not support",
                Hint(kResaveHint));
  if (size < 4 || std::memcmp(p, "PK\x03\x04", 4) != 0)
    throw Error(where, " is not a torch.save zip archive (no zip signature at the start)",
                Hint("expected a .pth/.bin written by torch.save; safetensors files and model directories are "
                     "read by other loaders"));
  Reader r;
  r.bytes = Bytes{p, size, &where};
  r.keepalive = bytes;
  r.entries = read_zip_directory(r.bytes);
  // The pickle is "<archive>/data.pkl"; torch names the folder after the file.
  std::string pkl;
  for (const auto& [name, e] : r.entries) {
    const size_t slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      if (!pkl.empty())
        throw Error(where, ": the archive holds two pickles (", pkl, ", ", name, ")",
                    Hint("not a single torch.save checkpoint; save it again"));
      pkl = name;
    }
  }
  if (pkl.empty())
    throw Error(where, ": the zip archive has no <archive>/data.pkl entry (", r.entries.size(), " entries)",
                Hint("this zip was not written by torch.save (a numpy .npz?)"));
  r.prefix = pkl.substr(0, pkl.size() - std::strlen("data.pkl"));
  if (auto it = r.entries.find(r.prefix + "byteorder"); it != r.entries.end()) {
    const auto [d, n] = entry_bytes(r.bytes, it->first, it->second);
    if (std::string_view(reinterpret_cast<const char*>(d), size_t(n)) != "little")
      throw Error(where, ": stored in '",
                  std::string(reinterpret_cast<const char*>(d), size_t(std::min<uint64_t>(n, 16))),
                  "' byte order; only little-endian checkpoints are supported",
                  Hint("save it again on a little-endian machine"));
  }
  const auto [pd, pn] = entry_bytes(r.bytes, pkl, r.entries.at(pkl));
  Machine vm(pd, size_t(pn), where);
  const int32_t root = vm.run();
  TorchCheckpoint out;
  out.origin = origin;
  r.vm = &vm;
  r.out = &out;
  r.visited.assign(vm.nodes.size(), 0);
  std::vector<std::string> path;
  r.walk(root, path, 0);
  return out;
}

TorchCheckpoint read_torch_checkpoint(const std::string& path) {
  const std::string where = "pytorch checkpoint " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw Error(where, ": cannot open: ", std::strerror(err), Hint("check the path and its permissions"));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error(where, " is not a regular file", Hint("pass the .pth / .bin file itself"));
  }
  const size_t size = size_t(st.st_size);
  if (size == 0) {
    ::close(fd);
    throw Error(where, " is empty (0 bytes)", Hint("the save or download was interrupted; do it again"));
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (m == MAP_FAILED) throw Error(where, ": mmap of ", size, " bytes failed: ", std::strerror(err));
  std::shared_ptr<const uint8_t> bytes(static_cast<const uint8_t*>(m),
                                       [size](const uint8_t* q) { ::munmap(const_cast<uint8_t*>(q), size); });
  return parse_torch_checkpoint(std::move(bytes), size, path);
}

std::vector<std::pair<std::string, Tensor>> torch_state_dict(const TorchCheckpoint& checkpoint, std::string* from,
                                                             std::vector<std::string>* ignored) {
  auto join = [](const std::vector<std::string>& path, size_t first) {
    std::string s;
    for (size_t i = first; i < path.size(); ++i) s += (i > first ? "." : "") + path[i];
    return s;
  };
  std::string key;
  bool nested = false;
  for (const char* k : {"model", "module", "state_dict", "model_state"}) {
    for (const auto& t : checkpoint.tensors)
      if (t.path.size() >= 2 && t.path[0] == k) {
        key = k;
        nested = true;
        break;
      }
    if (nested) break;
  }
  // A whole nn.Module (torch.save(model)): its tensors live under its attribute dicts.
  auto module_attribute = [](const std::string& p) { return p == "_modules" || p == "_parameters" || p == "_buffers"; };
  bool module = false;
  if (!nested)
    for (const auto& t : checkpoint.tensors) module = module || (t.path.size() >= 2 && module_attribute(t.path[0]));
  if (module) key = "(a pickled module)";
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& t : checkpoint.tensors) {
    const bool take = nested ? (t.path.size() >= 2 && t.path[0] == key)
                      : module ? (t.path.size() >= 2 && module_attribute(t.path[0]))
                               : t.path.size() == 1;
    if (take)
      out.emplace_back(join(t.path, nested ? 1 : 0), t.tensor);
    else if (ignored)
      ignored->push_back(join(t.path, 0));
  }
  if (from) *from = key;
  return out;
}

}  // namespace unmask::io
