// io/safetensors.cc: the safetensors reader (mmap + full validation) and writer.
//
// Layout of a file (reference/bert.md §4.4):
//   [0, 8)          u64 little-endian N = header length
//   [8, 8+N)        UTF-8 JSON: {name: {"dtype", "shape", "data_offsets": [b, e]}, "__metadata__"}
//   [8+N, size)     the data section; tensor bytes live at [8+N+b, 8+N+e), little-endian, C order
//
// The reader trusts nothing: every number in the header is checked against the file before a
// pointer is formed, so a truncated or hostile file is an Error, never an out-of-bounds read
// (fuzz/fuzz_safetensors.cc exercises this).
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "io/file.h"
#include "unmask/error.h"

namespace unmask::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data are little-endian; a big-endian host would need byte swaps");

namespace {

using json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we, so that a corrupt
// length cannot make us parse (and allocate for) gigabytes of JSON.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

constexpr const char* kSupportedDTypes = "F64, F32, F16, BF16, I64, I32, U8, BOOL";

bool dtype_from_name(std::string_view s, DType* out) {
  static const std::pair<std::string_view, DType> table[] = {
      {"F64", DType::f64}, {"F32", DType::f32}, {"F16", DType::f16},   {"BF16", DType::bf16},
      {"I64", DType::i64}, {"I32", DType::i32}, {"U8", DType::u8},     {"BOOL", DType::boolean}};
  for (const auto& [name, t] : table)
    if (name == s) return *out = t, true;
  return false;
}

std::string_view dtype_to_name(DType t) {
  switch (t) {
    case DType::f64: return "F64";
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

// Dtypes the format defines that we do not load. Naming them separately lets the error say
// "not supported" instead of "unknown" (which would suggest a corrupt file).
bool is_known_unsupported_dtype(std::string_view s) {
  static const std::string_view known[] = {"I8",      "I16",      "U16",        "U32",
                                           "U64",     "F8_E4M3",  "F8_E5M2",    "F8_E8M0",
                                           "F6_E2M3", "F6_E3M2",  "F4",         "C64",
                                           "F8_E4M3FNUZ", "F8_E5M2FNUZ"};
  return std::find(std::begin(known), std::end(known), s) != std::end(known);
}

// "F32[768,768]" — the stored dtype and shape, in the file's own spelling, for messages.
std::string spelled(DType t, const Shape& s) { return std::string(dtype_to_name(t)) + s.str(); }

// Reads a JSON number that must be a non-negative integer fitting in u64.
bool as_u64(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) return *out = v.get<uint64_t>(), true;
  if (v.is_number_integer()) {
    int64_t x = v.get<int64_t>();
    if (x < 0) return false;
    return *out = uint64_t(x), true;
  }
  return false;
}

}  // namespace

// ---- reading --------------------------------------------------------------------------------

SafeTensorsFile SafeTensorsFile::open(const std::string& path) {
  const std::string where = "safetensors: " + path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw Error(where, ": cannot open: ", std::strerror(err),
                Hint(err == ENOENT ? "check the path; for a model directory use open_model_weights(dir)"
                                   : "check the file's permissions"));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(where, ": cannot stat: ", std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error(where, " is a directory, not a safetensors file",
                Hint("pass the file (e.g. " + path + "/model.safetensors), or open the directory with open_model_weights()"));
  }
  const size_t size = size_t(st.st_size);
  if (size == 0) {
    ::close(fd);
    throw Error(where, " is empty (0 bytes)",
                Hint("the download or save was interrupted; fetch or save the file again"));
  }
  if (size < 8) {
    ::close(fd);
    throw Error(where, " has only ", size, " bytes, fewer than the 8-byte header length",
                Hint("the file is truncated or is not a safetensors file"));
  }
  // Read-only private mapping: pages are loaded lazily, and tensors returned by tensor() point
  // straight into it (no copy for aligned data), so writing through them would fault.
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping stays valid after close
  if (p == MAP_FAILED) throw Error(where, ": mmap of ", size, " bytes failed: ", std::strerror(err));
  std::shared_ptr<const uint8_t> bytes(static_cast<const uint8_t*>(p),
                                       [size](const uint8_t* q) { ::munmap(const_cast<uint8_t*>(q), size); });
  return parse(std::move(bytes), size, path);
}

SafeTensorsFile SafeTensorsFile::parse(std::shared_ptr<const uint8_t> bytes, size_t size,
                                       const std::string& origin) {
  const std::string where = "safetensors: " + origin;
  if (size < 8)
    throw Error(where, " has only ", size, " bytes, fewer than the 8-byte header length",
                Hint("the file is truncated or is not a safetensors file"));
  const uint8_t* base = bytes.get();
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base[i];  // u64 little-endian
  if (n > size - 8)
    throw Error(where, ": header length ", n, " runs past the end of the file (", size,
                " bytes, so at most ", size - 8, " are available for the header)",
                Hint("the file is truncated or is not a safetensors file; download or save it again"));
  if (n > kMaxHeaderBytes)
    throw Error(where, ": header length ", n, " exceeds the ", kMaxHeaderBytes, "-byte limit",
                Hint("the file is corrupt or not a safetensors file"));

  SafeTensorsFile f;
  f.origin_ = origin;
  f.size_ = size;
  f.data_start_ = size_t(8 + n);
  const uint64_t data_size = size - f.data_start_;

  // Parse the header. nlohmann keeps the last of duplicate keys silently, so the callback
  // records every top-level key to catch a name given twice (depth 1 = keys of the root).
  const char* hb = reinterpret_cast<const char*>(base + 8);
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1 && duplicate.empty() &&
        !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json header;
  try {
    header = json::parse(hb, hb + n, on_event);
  } catch (const json::exception& e) {
    throw Error(where, ": the ", n, "-byte header is not valid JSON: ", e.what(),
                Hint("the file is corrupt or not a safetensors file"));
  }
  if (!header.is_object())
    throw Error(where, ": the header must be a JSON object {name: {dtype, shape, data_offsets}}, got a JSON ",
                header.type_name(), Hint("the file is corrupt or not a safetensors file"));
  if (!duplicate.empty())
    throw Error(where, ": tensor '", duplicate, "' appears twice in the header",
                Hint("the file was written by a broken tool; save it again"));

  for (const auto& [name, entry] : header.items()) {
    const std::string what = "safetensors: tensor '" + name + "' in " + origin;
    if (name == "__metadata__") {
      if (!entry.is_object())
        throw Error(where, ": __metadata__ must be an object of strings, got a JSON ", entry.type_name());
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string())
          throw Error(where, ": __metadata__ value for '", k, "' must be a string, got a JSON ", v.type_name(),
                      Hint("safetensors metadata is a string->string map; store numbers as text"));
        f.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object())
      throw Error(what, ": entry must be an object {dtype, shape, data_offsets}, got a JSON ", entry.type_name());
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(key))
        throw Error(what, " has no \"", key, "\"", Hint("the file was written by a broken tool; save it again"));

    SafeTensorInfo info;
    info.name = name;
    const json& jd = entry["dtype"];
    if (!jd.is_string()) throw Error(what, ": dtype must be a string, got a JSON ", jd.type_name());
    const std::string ds = jd.get<std::string>();
    if (!dtype_from_name(ds, &info.dtype)) {
      if (is_known_unsupported_dtype(ds))
        throw Error(what, " has dtype ", ds, ", which unmask does not support (supported: ", kSupportedDTypes, ")",
                    Hint("convert it when saving, e.g. in PyTorch t.to(torch.float32) or t.to(torch.int64)"));
      throw Error(what, " has unknown dtype '", ds, "' (supported: ", kSupportedDTypes, ")",
                  Hint("the file is corrupt or uses a newer format revision; convert it to a supported dtype"));
    }

    const json& js = entry["shape"];
    if (!js.is_array()) throw Error(what, ": shape must be an array of integers, got a JSON ", js.type_name());
    if (js.size() > size_t(kMaxDims))
      throw Error(what, " has ", js.size(), " dimensions; unmask tensors have at most ", kMaxDims,
                  Hint("reshape the tensor before saving"));
    std::vector<int64_t> dims;
    // numel * element size, with overflow checks: a hostile shape must not wrap around and
    // match a small byte range.
    uint64_t need = dtype_size(info.dtype);
    bool overflow = false;
    for (const json& d : js) {
      uint64_t v = 0;
      if (!as_u64(d, &v) || v > uint64_t(INT64_MAX))
        throw Error(what, ": shape ", js.dump(), " has an entry ", d.dump(), " that is not a non-negative integer",
                    Hint("the file is corrupt; save it again"));
      dims.push_back(int64_t(v));
      overflow = overflow || __builtin_mul_overflow(need, v, &need);
    }
    if (overflow || need > uint64_t(INT64_MAX))
      throw Error(what, ": shape ", js.dump(), " of ", ds, " overflows 64-bit byte counts",
                  Hint("the file is corrupt; save it again"));
    info.shape = Shape(dims);

    const json& jo = entry["data_offsets"];
    if (!jo.is_array() || jo.size() != 2 || !as_u64(jo[0], &info.begin) || !as_u64(jo[1], &info.end))
      throw Error(what, ": data_offsets must be [begin, end] with non-negative integers, got ", jo.dump());
    // (built with concat, not string operator+: GCC 12 -O3 gives a false -Wrestrict there)
    const std::string offs = detail::concat("[", info.begin, ", ", info.end, "]");
    if (info.end < info.begin)
      throw Error(what, ": data_offsets ", offs, " end before they begin",
                  Hint("the file was written by a broken tool; save it again"));
    if (info.end > data_size)
      throw Error(what, ": data_offsets ", offs, " run past the end of the ", data_size,
                  "-byte data section (file size ", size, ")",
                  Hint("the file is truncated; download or save it again"));
    if (info.end - info.begin != need)
      throw Error(what, ": data_offsets ", offs, " hold ", info.end - info.begin, " bytes but ",
                  spelled(info.dtype, info.shape), " needs ", need,
                  Hint("the file is truncated or was written by a broken tool; save it again"));
    f.tensors_.push_back(std::move(info));
  }

  // Overlap check: sort ranges by start; each must begin at or after the furthest end so far.
  // Empty tensors occupy no bytes and may sit anywhere.
  std::vector<const SafeTensorInfo*> by_start;
  for (const auto& t : f.tensors_)
    if (t.end > t.begin) by_start.push_back(&t);
  std::sort(by_start.begin(), by_start.end(),
            [](const SafeTensorInfo* a, const SafeTensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_start.size(); ++i) {
    const SafeTensorInfo* a = by_start[i - 1];
    const SafeTensorInfo* b = by_start[i];
    if (b->begin < a->end)
      throw Error(where, ": tensors '", a->name, "' [", a->begin, ", ", a->end, "] and '", b->name, "' [",
                  b->begin, ", ", b->end, "] overlap",
                  Hint("the file was written by a broken tool; tied weights must be stored once"));
  }
  // header.items() walks a std::map, so tensors_ is already sorted by name (find() relies on it).
  f.bytes_ = std::move(bytes);
  return f;
}

const SafeTensorInfo* SafeTensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const SafeTensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

Tensor SafeTensorsFile::tensor(std::string_view name) const {
  const SafeTensorInfo* info = find(name);
  if (!info) {
    std::string some;
    for (size_t i = 0; i < tensors_.size() && i < 3; ++i) some += (i ? ", '" : "'") + tensors_[i].name + "'";
    throw Error("safetensors: no tensor '", name, "' in ", origin_, " (it holds ", tensors_.size(), " tensors",
                tensors_.empty() ? std::string() : ": " + some + (tensors_.size() > 3 ? ", ..." : ""), ")",
                Hint("check the name and the checkpoint's architecture; list names with tensors()"));
  }
  const uint8_t* p = bytes_.get() + data_start_ + info->begin;
  const size_t es = dtype_size(info->dtype);
  if (info->dtype == DType::boolean) {
    // A C++ bool holding anything but 0 or 1 is undefined behaviour for whoever reads it, so
    // check here, once, at the boundary (BOOL tensors are small masks; the scan is cheap).
    for (uint64_t i = 0; i < info->end - info->begin; ++i)
      if (p[i] > 1)
        throw Error("safetensors: tensor '", name, "' in ", origin_, " is BOOL but element ", i, " is byte ",
                    int(p[i]), ", not 0 or 1", Hint("the file is corrupt or the tensor is not boolean; save it again"));
  }
  if (reinterpret_cast<uintptr_t>(p) % es == 0) {
    // Zero-copy view; the aliasing shared_ptr keeps the whole mapping alive.
    std::shared_ptr<void> keep(bytes_, const_cast<uint8_t*>(bytes_.get()));
    return Tensor::from_blob(const_cast<uint8_t*>(p), info->shape, info->dtype, Device::cpu, std::move(keep));
  }
  // Misaligned (a writer that did not order tensors by element size): typed loads from p
  // would be undefined behaviour, so hand out an aligned copy.
  Tensor t = Tensor::empty(info->shape, info->dtype);
  if (info->end > info->begin) std::memcpy(t.raw(), p, info->end - info->begin);
  return t;
}

// ---- writing --------------------------------------------------------------------------------

namespace {

// The safetensors image of `tensors`, handed to `sink(data, n)` in order: the 8-byte header
// length, the header, each tensor's bytes.
void emit_safetensors(const std::string& where, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata,
                      const std::function<void(const void*, size_t)>& sink) {
  // Data order: element size descending, then name (as the reference writer does). With no
  // gaps between tensors (the reference reader rejects gaps), this makes every tensor start
  // at a multiple of its own element size; the data section itself starts 8-byte aligned.
  std::vector<const std::pair<std::string, Tensor>*> order;
  std::set<std::string_view> names;
  for (const auto& nt : tensors) {
    const auto& [name, t] = nt;
    if (name.empty() || name == "__metadata__")
      throw Error(where, ": invalid tensor name '", name, "'", Hint("names must be non-empty and not __metadata__"));
    if (!names.insert(name).second)
      throw Error(where, ": tensor '", name, "' is given twice", Hint("each name may appear once"));
    if (!t.defined()) throw Error(where, ": tensor '", name, "' is undefined (default-constructed)");
    if (t.device() != Device::cpu)
      throw Error(where, ": tensor '", name, "' is ", t.describe(), Hint("copy it to the CPU first"));
    order.push_back(&nt);
  }
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    size_t ea = dtype_size(a->second.dtype()), eb = dtype_size(b->second.dtype());
    return ea != eb ? ea > eb : a->first < b->first;
  });

  json header = json::object();
  uint64_t offset = 0;
  for (const auto* nt : order) {
    const Tensor& t = nt->second;
    uint64_t nbytes = t.nbytes();
    header[nt->first] = {{"dtype", dtype_to_name(t.dtype())},
                         {"shape", t.shape().to_vector()},
                         {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text;
  try {
    text = header.dump();  // keys sorted (std::map); throws on names that are not UTF-8
  } catch (const json::exception& e) {
    throw Error(where, ": cannot encode the header: ", e.what(), Hint("tensor names and metadata must be UTF-8"));
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // pad with spaces so data start 8-byte aligned

  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  sink(len, 8);
  sink(text.data(), text.size());
  for (const auto* nt : order) {
    const Tensor& t = nt->second;
    if (t.numel() == 0) continue;
    if (t.is_contiguous()) {
      sink(t.raw(), t.nbytes());
    } else {
      Tensor c = t.contiguous();  // one tensor at a time, so peak extra memory is one tensor
      sink(c.raw(), c.nbytes());
    }
  }
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  AtomicFileWriter w(path);
  emit_safetensors("write_safetensors " + path, tensors, metadata, [&](const void* p, size_t n) { w.write(p, n); });
  w.commit();
}

SafeTensorsFile SafeTensorsFile::from_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                              const std::string& origin) {
  size_t total = 0;
  emit_safetensors(origin, tensors, {{"format", "pt"}}, [&](const void*, size_t n) { total += n; });
  std::shared_ptr<uint8_t> image(static_cast<uint8_t*>(std::aligned_alloc(64, (total + 63) / 64 * 64)), std::free);
  if (!image) throw std::bad_alloc();
  size_t at = 0;
  emit_safetensors(origin, tensors, {{"format", "pt"}}, [&](const void* p, size_t n) {
    std::memcpy(image.get() + at, p, n);
    at += n;
  });
  return parse(std::const_pointer_cast<const uint8_t>(image), total, origin);
}

// ---- model directories ----------------------------------------------------------------------

std::vector<SafeTensorsFile> open_indexed_shards(const std::string& index_file,
                                                 const std::function<SafeTensorsFile(const std::string&)>& open_shard,
                                                 const std::function<std::string(const std::string&)>& stored_name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path index_path(index_file), d = index_path.parent_path();
  const std::string where = "open_model_weights: " + index_path.string();
  json index;
  try {
    index = json::parse(read_file(index_path.string()));
  } catch (const json::exception& e) {
    throw Error(where, " is not valid JSON: ", e.what(), Hint("download the index file again"));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(where, " has no \"weight_map\" object", Hint("download the index file again"));
  // Open each distinct shard once, in first-seen order of the (sorted) weight map.
  std::vector<std::string> shard_names;
  std::map<std::string, size_t> shard_of;
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      throw Error(where, ": weight_map entry for '", tensor, "' must be a file name, got a JSON ", shard.type_name());
    const std::string s = shard.get<std::string>();
    // Shards must sit beside the index: an absolute path or ".." could read anywhere.
    if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
      throw Error(where, ": weight_map names shard '", s, "' for '", tensor, "', which is not a plain file name",
                  Hint("shards must be files in the model directory"));
    if (!shard_of.count(s)) shard_of[s] = shard_names.size(), shard_names.push_back(s);
  }
  if (shard_names.empty()) throw Error(where, ": weight_map is empty", Hint("download the index file again"));
  std::vector<SafeTensorsFile> files;
  for (const std::string& s : shard_names) {
    const fs::path p = d / s;
    if (!fs::exists(p, ec))
      throw Error(where, " lists shard ", s, " but ", p.string(), " does not exist",
                  Hint("the download is incomplete; fetch the missing shard"));
    files.push_back(open_shard(p.string()));
  }
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    const SafeTensorsFile& f = files[shard_of[shard.get<std::string>()]];
    if (!f.find(stored_name ? stored_name(tensor) : tensor))
      throw Error(where, " says tensor '", tensor, "' is in ", f.path(), ", but that shard does not hold it",
                  Hint("the shards and the index come from different saves; download them again together"));
  }
  return files;
}

std::vector<SafeTensorsFile> open_model_weights(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("open_model_weights: ", dir, fs::exists(dir, ec) ? " is not a directory" : " does not exist",
                Hint("pass the model directory (the one holding config.json and model.safetensors)"));
  const fs::path d(dir);
  if (fs::exists(d / "model.safetensors", ec)) return {SafeTensorsFile::open((d / "model.safetensors").string())};

  const fs::path index_path = d / "model.safetensors.index.json";
  if (fs::exists(index_path, ec)) return open_indexed_shards(index_path.string(), &SafeTensorsFile::open);

  // Neither: say what the directory does hold that looks like weights.
  static const char* kWeightExt[] = {".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".safetensors", ".onnx", ".gguf", ".npz"};
  std::vector<std::string> found;
  bool has_torch = false, has_other_st = false;
  for (const auto& e : fs::directory_iterator(d, ec)) {
    const std::string name = e.path().filename().string(), ext = e.path().extension().string();
    if (std::find(std::begin(kWeightExt), std::end(kWeightExt), ext) == std::end(kWeightExt)) continue;
    found.push_back(name);
    has_torch = has_torch || ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt";
    has_other_st = has_other_st || ext == ".safetensors";
  }
  std::sort(found.begin(), found.end());
  std::string list;
  for (const auto& s : found) list += (list.empty() ? "" : ", ") + s;
  const std::string msg = "open_model_weights: " + dir +
                          " has neither model.safetensors nor model.safetensors.index.json";
  if (has_other_st)
    throw Error(msg, "; weight-like files there: ", list,
                Hint("rename the safetensors file to model.safetensors, or open it with SafeTensorsFile::open"));
  if (has_torch)
    throw Error(msg, "; weight-like files there: ", list,
                Hint("convert to safetensors: python -c 'from transformers import AutoModelForMaskedLM as M; "
                     "m = M.from_pretrained(\"" + dir + "\"); m.save_pretrained(\"" + dir +
                     "\", safe_serialization=True)' (use the Auto class of the checkpoint's head)"));
  throw Error(msg, found.empty() ? "; it holds no weight files at all" : "; weight-like files there: " + list,
              Hint("download the model's safetensors weights into the directory, e.g. huggingface-cli download <model> --local-dir " + dir));
}

}  // namespace unmask::io
