// tests/test_io.cc: atomic files, safetensors and npy: round trips, every malformed-input
// error, and interop with NumPy / a hand-written Python safetensors writer.
//
// Malformed files are built byte by byte here, so each validation rule in io/safetensors.cc
// has a case that triggers it and checks the message says what went wrong.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "io/file.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "unmask/error.h"
#include "error_test_util.h"
#include "temp_dir.h"

using namespace unmask;
using namespace unmask::io;
namespace fs = std::filesystem;

namespace {

using unmask::test::TempDir;

using unmask::test::error_of;

#define EXPECT_ERROR_CONTAINS(stmt, substr)                                             \
  do {                                                                                  \
    std::string msg_ = error_of([&] { stmt; });                                         \
    EXPECT_NE(msg_.find(substr), std::string::npos) << "message: " << msg_ << "\n"      \
                                                    << "expected to contain: " << substr; \
  } while (0)

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s += char(uint8_t(v >> (8 * i)));
}

// A safetensors image: 8-byte length (the header's own unless `len` overrides it), header, data.
std::string st_image(const std::string& header, size_t data_bytes, std::optional<uint64_t> len = {}) {
  std::string s;
  put_u64(s, len ? *len : header.size());
  s += header;
  s.append(data_bytes, '\0');
  return s;
}

SafeTensorsFile parse_bytes(const std::string& b, const std::string& origin = "/x/model.safetensors") {
  std::shared_ptr<uint8_t> p(new uint8_t[b.size() + 1], std::default_delete<uint8_t[]>());
  std::memcpy(p.get(), b.data(), b.size());
  return SafeTensorsFile::parse(p, b.size(), origin);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == cb.nbytes() && std::memcmp(ca.raw(), cb.raw(), ca.nbytes()) == 0;
}

// A tensor whose bytes are 0, 1, 2, ... (mod 251), so any misplaced byte shows.
Tensor patterned(const Shape& shape, DType dtype, int seed = 0) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i)
    p[i] = dtype == DType::boolean ? uint8_t((i + seed) % 2) : uint8_t((i * 7 + seed) % 251);
  return t;
}

// Runs a Python script with /usr/bin/python3; returns the exit status, output in *out.
int run_python(const TempDir& dir, const std::string& script, std::string* out) {
  const std::string py = dir / "script.py", log = dir / "script.log";
  write_bytes(py, script);
  int rc = std::system(("/usr/bin/python3 " + py + " > " + log + " 2>&1").c_str());
  *out = read_file(log);
  return rc;
}

bool have_python_module(const char* module) {
  if (::access("/usr/bin/python3", X_OK) != 0) return false;
  return std::system((std::string("/usr/bin/python3 -c 'import ") + module + "' > /dev/null 2>&1").c_str()) == 0;
}

}  // namespace

// ---- file.h ---------------------------------------------------------------------------------

TEST(IoFile, WriteReadAndOverwrite) {
  TempDir d;
  const std::string p = d / "a.bin";
  EXPECT_FALSE(file_exists(p));
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char(i * 31);
  write_file_atomic(p, big);
  EXPECT_TRUE(file_exists(p));
  EXPECT_EQ(read_file(p), big);
  write_file_atomic(p, "short");
  EXPECT_EQ(read_file(p), "short");
  write_file_atomic(p, "");
  EXPECT_EQ(read_file(p), "");
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()), 1) << "temp file left behind";
}

TEST(IoFile, ReadErrorsNamePathAndReason) {
  TempDir d;
  EXPECT_ERROR_CONTAINS(read_file(d / "missing.txt"), "missing.txt");
  EXPECT_ERROR_CONTAINS(read_file(d / "missing.txt"), "No such file");
  EXPECT_ERROR_CONTAINS(read_file(d.path.string()), "is a directory");
}

TEST(IoFile, WriteIntoMissingDirectoryFails) {
  TempDir d;
  const std::string p = d / "no/such/dir/f.bin";
  std::string msg = error_of([&] { write_file_atomic(p, "x"); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;  // the hint
}

TEST(IoFile, FailedRenameKeepsTargetAndRemovesTemp) {
  TempDir d;
  // A non-empty directory cannot be replaced by rename(): the commit step fails.
  const std::string target = d / "target";
  fs::create_directory(target);
  write_bytes(target + "/keep.txt", "keep");
  EXPECT_ERROR_CONTAINS(write_file_atomic(target, "new"), "cannot rename");
  EXPECT_TRUE(fs::is_directory(target));
  EXPECT_EQ(read_file(target + "/keep.txt"), "keep");
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()), 1) << "temp file left behind";
}

TEST(IoFile, UncommittedWriterLeavesOldFile) {
  TempDir d;
  const std::string p = d / "f.txt";
  write_file_atomic(p, "old");
  {
    AtomicFileWriter w(p);
    w.write("new contents");
    EXPECT_TRUE(file_exists(w.temp_path()));
  }  // destroyed without commit(), as when an exception unwinds
  EXPECT_EQ(read_file(p), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()), 1);
}

TEST(IoFile, ReplacementKeepsFileMode) {
  TempDir d;
  const std::string p = d / "f.txt";
  write_file_atomic(p, "v1");
  ::chmod(p.c_str(), 0600);
  write_file_atomic(p, "v2");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// ---- safetensors: round trip ----------------------------------------------------------------

TEST(SafeTensors, RoundTripAllDtypesAndShapes) {
  TempDir d;
  const std::string p = d / "model.safetensors";
  Tensor wide = patterned({4, 6}, DType::f32, 3);
  std::vector<std::pair<std::string, Tensor>> in = {
      {"f32", patterned({2, 3}, DType::f32)},
      {"f64", patterned({3}, DType::f64)},
      {"f16", patterned({5}, DType::f16)},  // odd byte count: later tensors must stay aligned
      {"bf16", patterned({2, 2}, DType::bf16)},
      {"i64", patterned({1, 4}, DType::i64)},
      {"i32", patterned({7}, DType::i32)},
      {"u8", patterned({3}, DType::u8)},
      {"bool", patterned({4}, DType::boolean)},
      {"scalar", patterned({}, DType::f32, 9)},
      {"empty", Tensor::empty({0, 3}, DType::f32)},
      {"strided", wide.slice(1, 1, 4)},  // non-contiguous: written as a packed copy
      {"six_dims", patterned({1, 2, 1, 2, 1, 2}, DType::i32)},
      {"bert.encoder.layer.0.attention.self.query.weight", patterned({8, 8}, DType::f32, 5)},
  };
  write_safetensors(p, in, {{"format", "pt"}, {"note", "unit test"}});
  SafeTensorsFile f = SafeTensorsFile::open(p);
  EXPECT_EQ(f.path(), p);
  ASSERT_EQ(f.tensors().size(), in.size());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "unit test");
  for (const auto& [name, t] : in) {
    SCOPED_TRACE(name);
    ASSERT_NE(f.find(name), nullptr);
    Tensor r = f.tensor(name);
    EXPECT_EQ(r.dtype(), t.dtype());
    EXPECT_EQ(r.shape(), t.shape());
    EXPECT_TRUE(r.is_contiguous());
    EXPECT_TRUE(same_bytes(r, t));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r.raw()) % dtype_size(r.dtype()), 0u);
  }
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_ERROR_CONTAINS(f.tensor("nope"), "no tensor 'nope'");
}

TEST(SafeTensors, TensorViewsOutliveTheFileObject) {
  TempDir d;
  const std::string p = d / "m.safetensors";
  Tensor t = patterned({16, 16}, DType::f32);
  write_safetensors(p, {{"w", t}});
  Tensor view;
  { view = SafeTensorsFile::open(p).tensor("w"); }  // the mapping must stay alive in `view`
  EXPECT_TRUE(same_bytes(view, t));
}

TEST(SafeTensors, WriterOutputMatchesTheFormatByHand) {
  TempDir d;
  const std::string p = d / "m.safetensors";
  std::vector<std::pair<std::string, Tensor>> in = {
      {"z_u8", patterned({3}, DType::u8)}, {"a_f16", patterned({3}, DType::f16)},
      {"m_f64", patterned({2}, DType::f64)}, {"b_f32", patterned({1}, DType::f32)},
      {"e_empty", Tensor::empty({0}, DType::i64)}};
  write_safetensors(p, in);
  const std::string b = read_file(p);
  ASSERT_GE(b.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(b[i]);
  EXPECT_EQ((8 + n) % 8, 0u) << "data section must start 8-byte aligned";
  const std::string header = b.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}')) << "padding must be trailing spaces";
  const nlohmann::json h = nlohmann::json::parse(header);
  EXPECT_EQ(h["__metadata__"]["format"], "pt");  // the default metadata
  // Keys appear sorted in the text.
  std::vector<size_t> pos;
  for (const char* k : {"a_f16", "b_f32", "e_empty", "m_f64", "z_u8"}) pos.push_back(header.find(std::string("\"") + k + "\""));
  EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end()));
  // Ranges tile the data section exactly (no gaps, no overlap), each aligned to its element size.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, t] : in) {
    const auto& e = h[name];
    EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), t.shape().to_vector());
    uint64_t b0 = e["data_offsets"][0], e0 = e["data_offsets"][1];
    EXPECT_EQ(e0 - b0, t.nbytes());
    EXPECT_EQ(b0 % dtype_size(t.dtype()), 0u) << name;
    EXPECT_EQ(std::memcmp(b.data() + 8 + n + b0, t.raw(), t.nbytes()), 0) << name;
    ranges.push_back({b0, e0});
  }
  EXPECT_EQ(h["a_f16"]["dtype"], "F16");
  EXPECT_EQ(h["m_f64"]["dtype"], "F64");
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (auto [b0, e0] : ranges) {
    EXPECT_EQ(b0, at);
    at = e0;
  }
  EXPECT_EQ(8 + n + at, b.size());
}

TEST(SafeTensors, WriterRejectsBadInput) {
  TempDir d;
  const std::string p = d / "m.safetensors";
  Tensor t = patterned({2}, DType::f32);
  EXPECT_ERROR_CONTAINS(write_safetensors(p, {{"a", t}, {"a", t}}), "'a' is given twice");
  EXPECT_ERROR_CONTAINS(write_safetensors(p, {{"__metadata__", t}}), "invalid tensor name");
  EXPECT_ERROR_CONTAINS(write_safetensors(p, {{"", t}}), "invalid tensor name");
  EXPECT_ERROR_CONTAINS(write_safetensors(p, {{"u", Tensor()}}), "undefined");
  EXPECT_FALSE(file_exists(p));
}

TEST(SafeTensors, ReadsMisalignedDataAsAlignedCopy) {
  // Data laid out as U8[3] then F32[2] at offset 3: the F32 bytes are misaligned in the file.
  const std::string header = R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}})";
  std::string img = st_image(header + std::string((8 - header.size() % 8) % 8, ' '), 0);
  const float vals[2] = {1.5f, -2.25f};
  img += std::string("\x01\x02\x03", 3);
  img.append(reinterpret_cast<const char*>(vals), 8);
  SafeTensorsFile f = parse_bytes(img);
  Tensor b = f.tensor("b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.raw()) % 4, 0u);
  EXPECT_EQ(b.data<float>()[0], 1.5f);
  EXPECT_EQ(b.data<float>()[1], -2.25f);
  EXPECT_EQ(f.tensor("a").data<uint8_t>()[2], 3);
}

// ---- safetensors: every malformed input ---------------------------------------------------

struct BadHeaderCase {
  const char* label;
  std::string header;
  size_t data_bytes;
  std::string expect;
};

TEST(SafeTensors, EveryMalformedHeaderIsAnError) {
  auto entry = [](const std::string& body) { return "{\"t\":{" + body + "}}"; };
  const std::vector<BadHeaderCase> cases = {
      {"not json", "{\"t\": [", 0, "not valid JSON"},
      {"garbage", "\xff\xfe garbage", 0, "not valid JSON"},
      {"empty header", "", 0, "not valid JSON"},
      {"array", "[1,2,3]", 0, "must be a JSON object"},
      {"string", "\"hi\"", 0, "must be a JSON object"},
      {"entry not object", "{\"t\": 5}", 0, "tensor 't' in /x/model.safetensors: entry must be an object"},
      {"missing dtype", entry(R"("shape":[1],"data_offsets":[0,4])"), 4, "has no \"dtype\""},
      {"missing shape", entry(R"("dtype":"F32","data_offsets":[0,4])"), 4, "has no \"shape\""},
      {"missing offsets", entry(R"("dtype":"F32","shape":[1])"), 4, "has no \"data_offsets\""},
      {"dtype not string", entry(R"("dtype":3,"shape":[1],"data_offsets":[0,4])"), 4, "dtype must be a string"},
      {"unknown dtype", entry(R"("dtype":"XYZ","shape":[1],"data_offsets":[0,4])"), 4, "unknown dtype 'XYZ'"},
      {"I8", entry(R"("dtype":"I8","shape":[1],"data_offsets":[0,1])"), 1, "tensor 't' in /x/model.safetensors has dtype I8, which unmask does not support"},
      {"I16", entry(R"("dtype":"I16","shape":[1],"data_offsets":[0,2])"), 2, "has dtype I16"},
      {"F8", entry(R"("dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1])"), 1, "has dtype F8_E4M3"},
      {"unsupported hint", entry(R"("dtype":"I8","shape":[1],"data_offsets":[0,1])"), 1, "(hint: convert it"},
      {"shape not array", entry(R"("dtype":"F32","shape":4,"data_offsets":[0,4])"), 4, "shape must be an array"},
      {"negative dim", entry(R"("dtype":"F32","shape":[-1],"data_offsets":[0,4])"), 4, "entry -1 that is not a non-negative integer"},
      {"float dim", entry(R"("dtype":"F32","shape":[1.5],"data_offsets":[0,4])"), 4, "entry 1.5 that is not a non-negative integer"},
      {"string dim", entry(R"("dtype":"F32","shape":["2"],"data_offsets":[0,8])"), 8, "not a non-negative integer"},
      {"huge dim", entry(R"("dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4])"), 4, "not a non-negative integer"},
      {"overflow", entry(R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0])"), 0, "overflows"},
      {"overflow by size", entry(R"("dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0])"), 0, "overflows"},
      {"seven dims", entry(R"("dtype":"U8","shape":[1,1,1,1,1,1,1],"data_offsets":[0,1])"), 1, "has 7 dimensions"},
      {"offsets arity", entry(R"("dtype":"F32","shape":[1],"data_offsets":[0])"), 4, "data_offsets must be [begin, end]"},
      {"offsets negative", entry(R"("dtype":"F32","shape":[1],"data_offsets":[-4,0])"), 4, "data_offsets must be [begin, end]"},
      {"offsets float", entry(R"("dtype":"F32","shape":[1],"data_offsets":[0,4.0])"), 4, "data_offsets must be [begin, end]"},
      {"end before begin", entry(R"("dtype":"F32","shape":[1],"data_offsets":[8,4])"), 8, "data_offsets [8, 4] end before they begin"},
      {"out of range", entry(R"("dtype":"F32","shape":[2],"data_offsets":[0,8])"), 4, "data_offsets [0, 8] run past the end of the 4-byte data section"},
      {"far out of range", entry(R"("dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615])"), 4, "run past the end"},
      {"byte count",
       R"({"bert.encoder.layer.0.attention.self.query.weight":{"dtype":"F32","shape":[768,768],"data_offsets":[0,100]}})", 100,
       "safetensors: tensor 'bert.encoder.layer.0.attention.self.query.weight' in /x/model.safetensors: "
       "data_offsets [0, 100] hold 100 bytes but F32[768,768] needs 2359296 (hint: the file is truncated"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12,
       "tensors 'a' [0, 8] and 'b' [4, 12] overlap"},
      {"overlap out of name order",
       R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[8,12]},"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
       R"("c":{"dtype":"U8","shape":[10],"data_offsets":[1,11]}})", 12, "overlap"},
      {"same range twice",
       R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 4, "overlap"},
      {"duplicate names",
       R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", 2,
       "tensor 'a' appears twice"},
      {"metadata not object", R"({"__metadata__":"pt"})", 0, "__metadata__ must be an object"},
      {"metadata value not string", R"({"__metadata__":{"format":"pt","epoch":3}})", 0, "__metadata__ value for 'epoch' must be a string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    std::string msg = error_of([&] { parse_bytes(st_image(c.header, c.data_bytes)); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "message: " << msg << "\nexpected: " << c.expect;
    EXPECT_NE(msg.find("/x/model.safetensors"), std::string::npos) << "the file must be named: " << msg;
  }
}

TEST(SafeTensors, AcceptsEdgeCasesThatAreValid) {
  // No tensors at all, metadata only, zero-size tensors sharing an offset, whitespace padding.
  EXPECT_TRUE(parse_bytes(st_image("{}", 0)).tensors().empty());
  EXPECT_EQ(parse_bytes(st_image(R"({"__metadata__":{}})", 0)).metadata().size(), 0u);
  SafeTensorsFile f = parse_bytes(st_image(
      R"({"e1":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"e2":{"dtype":"F32","shape":[3,0],"data_offsets":[0,0]},)"
      R"("s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}     )", 8));
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensor("s").numel(), 1);
  EXPECT_EQ(f.tensor("e2").numel(), 0);
}

TEST(SafeTensors, BoolBytesMustBeZeroOrOne) {
  std::string img = st_image(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", 0);
  img += std::string("\x01\x00\x02", 3);
  SafeTensorsFile f = parse_bytes(img);  // the header is fine; the data are checked on access
  EXPECT_ERROR_CONTAINS(f.tensor("m"), "tensor 'm' in /x/model.safetensors is BOOL but element 2 is byte 2");
}

TEST(SafeTensors, HeaderLengthErrors) {
  EXPECT_ERROR_CONTAINS(parse_bytes(std::string("\x01\x02\x03", 3)), "has only 3 bytes");
  // Claims 1000 header bytes in a 20-byte file: both numbers must be in the message.
  std::string msg = error_of([&] { parse_bytes(st_image("{}", 10, 1000)); });
  EXPECT_NE(msg.find("header length 1000"), std::string::npos) << msg;
  EXPECT_NE(msg.find("20 bytes"), std::string::npos) << msg;
  EXPECT_ERROR_CONTAINS(parse_bytes(st_image("{}", 0, ~uint64_t(1))), "runs past the end");  // 2^64 - 2
}

TEST(SafeTensors, OpenRejectsDirectoriesEmptyAndTinyFiles) {
  TempDir d;
  EXPECT_ERROR_CONTAINS(SafeTensorsFile::open(d.path.string()), "is a directory");
  EXPECT_ERROR_CONTAINS(SafeTensorsFile::open(d / "missing.safetensors"), "No such file");
  write_bytes(d / "empty.safetensors", "");
  EXPECT_ERROR_CONTAINS(SafeTensorsFile::open(d / "empty.safetensors"), "is empty");
  write_bytes(d / "tiny.safetensors", "abc");
  EXPECT_ERROR_CONTAINS(SafeTensorsFile::open(d / "tiny.safetensors"), "has only 3 bytes");
  // A truncated copy of a valid file.
  write_safetensors(d / "ok.safetensors", {{"w", patterned({64}, DType::f32)}});
  std::string b = read_file(d / "ok.safetensors");
  write_bytes(d / "cut.safetensors", b.substr(0, b.size() - 10));
  EXPECT_ERROR_CONTAINS(SafeTensorsFile::open(d / "cut.safetensors"), "run past the end");
}

// ---- open_model_weights ---------------------------------------------------------------------

TEST(ModelWeights, SingleFileAndShardedIndex) {
  TempDir d;
  write_safetensors(d / "model.safetensors", {{"w", patterned({2}, DType::f32)}});
  auto one = open_model_weights(d.path.string());
  ASSERT_EQ(one.size(), 1u);
  EXPECT_NE(one[0].find("w"), nullptr);

  TempDir s;
  write_safetensors(s / "model-00001-of-00002.safetensors", {{"a", patterned({2}, DType::f32)}, {"b", patterned({3}, DType::i64)}});
  write_safetensors(s / "model-00002-of-00002.safetensors", {{"c", patterned({4}, DType::f16)}});
  write_bytes(s / "model.safetensors.index.json",
              R"({"metadata":{"total_size":48},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
              R"("b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})");
  auto shards = open_model_weights(s.path.string());
  ASSERT_EQ(shards.size(), 2u);  // each distinct shard once
  EXPECT_NE(shards[0].find("a"), nullptr);
  EXPECT_NE(shards[1].find("c"), nullptr);
}

TEST(ModelWeights, ErrorsNameTheDirectoryAndWhatIsThere) {
  TempDir d;
  EXPECT_ERROR_CONTAINS(open_model_weights(d / "nope"), "does not exist");
  EXPECT_ERROR_CONTAINS(open_model_weights(d.path.string()), "no weight files");
  write_bytes(d / "pytorch_model.bin", "not really");
  write_bytes(d / "config.json", "{}");
  std::string msg = error_of([&] { open_model_weights(d.path.string()); });
  EXPECT_NE(msg.find(d.path.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("pytorch_model.bin"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("safe_serialization=True"), std::string::npos) << msg;

  write_bytes(d / "weights.safetensors", "x");
  EXPECT_ERROR_CONTAINS(open_model_weights(d.path.string()), "rename the safetensors file");

  TempDir s;
  write_safetensors(s / "shard1.safetensors", {{"a", patterned({2}, DType::f32)}});
  write_bytes(s / "model.safetensors.index.json", R"({"weight_map":{"a":"shard1.safetensors","b":"shard2.safetensors"}})");
  EXPECT_ERROR_CONTAINS(open_model_weights(s.path.string()), "lists shard shard2.safetensors");
  write_bytes(s / "model.safetensors.index.json", R"({"weight_map":{"a":"shard1.safetensors","z":"shard1.safetensors"}})");
  EXPECT_ERROR_CONTAINS(open_model_weights(s.path.string()), "tensor 'z' is in");
  write_bytes(s / "model.safetensors.index.json", R"({"weight_map":{"a":"../etc/passwd"}})");
  EXPECT_ERROR_CONTAINS(open_model_weights(s.path.string()), "not a plain file name");
  write_bytes(s / "model.safetensors.index.json", R"({"weights":{}})");
  EXPECT_ERROR_CONTAINS(open_model_weights(s.path.string()), "no \"weight_map\"");
  write_bytes(s / "model.safetensors.index.json", R"({"weight_map":)");
  EXPECT_ERROR_CONTAINS(open_model_weights(s.path.string()), "is not valid JSON");
}

// ---- npy ------------------------------------------------------------------------------------

TEST(Npy, RoundTripAllDtypes) {
  TempDir d;
  Tensor wide = patterned({3, 5}, DType::f64);
  const std::vector<Tensor> cases = {
      patterned({2, 3}, DType::f32), patterned({4}, DType::f64),      patterned({2, 2, 2}, DType::i32),
      patterned({3}, DType::i64),    patterned({5}, DType::u8),       patterned({6}, DType::boolean),
      patterned({7}, DType::f16),    patterned({}, DType::f32),       Tensor::empty({0, 4}, DType::f32),
      wide.slice(1, 1, 3),           patterned({1, 1, 1, 1, 1, 2}, DType::u8)};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].describe());
    const std::string p = d / ("a" + std::to_string(i) + ".npy");
    write_npy(p, cases[i]);
    const std::string b = read_file(p);
    ASSERT_GE(b.size(), 10u);
    EXPECT_EQ(b.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    size_t hlen = uint8_t(b[8]) | size_t(uint8_t(b[9])) << 8;
    EXPECT_EQ((10 + hlen) % 64, 0u) << "data must start 64-byte aligned";
    EXPECT_EQ(b[10 + hlen - 1], '\n');
    Tensor r = read_npy(p);
    EXPECT_EQ(r.dtype(), cases[i].dtype());
    EXPECT_EQ(r.shape(), cases[i].shape());
    EXPECT_TRUE(same_bytes(r, cases[i]));
  }
  EXPECT_ERROR_CONTAINS(write_npy(d / "x.npy", patterned({2}, DType::bf16)), "NumPy has no bf16");
}

TEST(Npy, HeaderTextMatchesNumpy) {
  TempDir d;
  write_npy(d / "a.npy", patterned({2, 3}, DType::f32));
  write_npy(d / "b.npy", patterned({3}, DType::u8));
  write_npy(d / "c.npy", patterned({}, DType::i64));
  auto header = [&](const std::string& f) {
    std::string b = read_file(d / f);
    return b.substr(10, b.find('}') - 10 + 1);
  };
  EXPECT_EQ(header("a.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
  EXPECT_EQ(header("b.npy"), "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }");
  EXPECT_EQ(header("c.npy"), "{'descr': '<i8', 'fortran_order': False, 'shape': (), }");
}

// A .npy image with the given header dict and data, version `major`.
static std::string npy_image(const std::string& dict, size_t data_bytes, int major = 1) {
  std::string s("\x93NUMPY", 6);
  s += char(major);
  s += char(0);
  const size_t n = dict.size() + 1;
  if (major == 1) {
    s += char(n & 0xff), s += char(n >> 8);
  } else {
    for (int i = 0; i < 4; ++i) s += char(uint8_t(n >> (8 * i)));
  }
  s += dict + "\n";
  s.append(data_bytes, '\x01');
  return s;
}

TEST(Npy, ReadsV2AndV3HeadersAndKeyOrder) {
  TempDir d;
  write_bytes(d / "v2.npy", npy_image("{'shape': (2,), 'fortran_order': False, 'descr': '<i4'}", 8, 2));
  Tensor a = read_npy(d / "v2.npy");
  EXPECT_EQ(a.dtype(), DType::i32);
  EXPECT_EQ(a.shape(), Shape({2}));
  EXPECT_EQ(a.data<int32_t>()[1], 0x01010101);
  write_bytes(d / "v3.npy", npy_image("{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (1, 1), }", 8, 3));
  EXPECT_EQ(read_npy(d / "v3.npy").dtype(), DType::f64);
}

TEST(Npy, EveryMalformedFileIsAnError) {
  TempDir d;
  const std::string p = d / "bad.npy";
  struct Case { const char* label; std::string bytes; std::string expect; };
  const std::vector<Case> cases = {
      {"magic", "PK\x03\x04 not npy at all", "is not a .npy file"},
      {"short", "\x93NUM", "is not a .npy file"},
      {"version", npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4, 4), "format version 4.0"},
      {"fortran", npy_image("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16), "Fortran (column-major)"},
      {"big endian", npy_image("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8), "big-endian"},
      {"unsupported", npy_image("{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }", 4), "dtype '<i2'"},
      {"structured", npy_image("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8), "structured dtypes"},
      {"truncated data", npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 8), "needs 12 data bytes but the file has 8"},
      {"trailing data", npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 8), "trailing bytes"},
      {"negative dim", npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 0), "non-negative integer"},
      {"missing key", npy_image("{'descr': '<f4', 'shape': (1,), }", 4), "missing key 'fortran_order'"},
      {"unknown key", npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4), "unexpected key 'x'"},
      {"seven dims", npy_image("{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1), }", 1), "7 dimensions"},
      {"overflow", npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 0), "overflows"},
      {"header past end", std::string("\x93NUMPY\x01\x00\xff\x00{", 11), "runs past the end"},
      {"not a dict", npy_image("['descr']", 0), "cannot parse the header"},
      {"bool not 0/1", npy_image("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", 0) + std::string("\x00\x05", 2),
       "bool element 1 is byte 5"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    write_bytes(p, c.bytes);
    std::string msg = error_of([&] { read_npy(p); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "message: " << msg << "\nexpected: " << c.expect;
    EXPECT_NE(msg.find(p), std::string::npos) << "the file must be named: " << msg;
  }
}

// ---- interop with NumPy and a Python-written safetensors file -------------------------------

TEST(Interop, NumpyLoadsWhatWeWriteAndWeLoadWhatNumpyWrites) {
  if (!have_python_module("numpy")) GTEST_SKIP() << "/usr/bin/python3 with numpy not available";
  TempDir d;
  // Ours -> NumPy: values i * 0.5 (exact in every float type) and i for the integer types.
  auto filled = [](DType t, const Shape& s) {
    Tensor x = Tensor::empty(s, t);
    for (int64_t i = 0; i < x.numel(); ++i) {
      switch (t) {
        case DType::f32: x.data<float>()[i] = float(i) * 0.5f; break;
        case DType::f64: x.data<double>()[i] = double(i) * 0.5; break;
        case DType::i32: x.data<int32_t>()[i] = int32_t(i) - 3; break;
        case DType::i64: x.data<int64_t>()[i] = int64_t(i) << 33; break;
        case DType::u8: x.data<uint8_t>()[i] = uint8_t(i + 200); break;
        case DType::boolean: x.data<bool>()[i] = i % 3 == 0; break;
        case DType::f16: static_cast<uint16_t*>(x.raw())[i] = uint16_t(0x3c00 + (i << 8)); break;  // 1, 1.25, ...
        default: break;
      }
    }
    return x;
  };
  write_npy(d / "f32.npy", filled(DType::f32, {2, 3}));
  write_npy(d / "f64.npy", filled(DType::f64, {4}));
  write_npy(d / "i32.npy", filled(DType::i32, {2, 2, 2}));
  write_npy(d / "i64.npy", filled(DType::i64, {3}));
  write_npy(d / "u8.npy", filled(DType::u8, {5}));
  write_npy(d / "b1.npy", filled(DType::boolean, {4}));
  write_npy(d / "f16.npy", filled(DType::f16, {3}));
  write_npy(d / "scalar.npy", filled(DType::f32, {}));
  write_npy(d / "empty.npy", filled(DType::f32, {0, 3}));
  const std::string dir = d.path.string();
  std::string out;
  int rc = run_python(d, R"(
import numpy as np, sys
d = ")" + dir + R"("
def check(name, expect):
    a = np.load(d + "/" + name)
    assert a.dtype == expect.dtype and a.shape == expect.shape, (name, a.dtype, a.shape)
    assert np.array_equal(a, expect), (name, a, expect)
check("f32.npy", (np.arange(6, dtype=np.float32) * 0.5).reshape(2, 3))
check("f64.npy", np.arange(4) * 0.5)
check("i32.npy", (np.arange(8, dtype=np.int32) - 3).reshape(2, 2, 2))
check("i64.npy", np.arange(3, dtype=np.int64) << 33)
check("u8.npy", (np.arange(5) + 200).astype(np.uint8))
check("b1.npy", np.arange(4) % 3 == 0)
check("f16.npy", np.array([1, 1.25, 1.5], dtype=np.float16))
check("scalar.npy", np.array(0, dtype=np.float32))
check("empty.npy", np.zeros((0, 3), dtype=np.float32))
# NumPy -> ours, including a v2 header and a transposed source made C-contiguous.
np.save(d + "/np_f32.npy", np.ascontiguousarray(np.arange(12, dtype=np.float32).reshape(3, 4).T))
np.save(d + "/np_i64.npy", np.array([-1, 2**40], dtype=np.int64))
np.save(d + "/np_bool.npy", np.array([[True, False]]))
np.save(d + "/np_f16.npy", np.array([0.5, -2], dtype=np.float16))
np.save(d + "/np_scalar.npy", np.float64(3.25))
with open(d + "/np_v2.npy", "wb") as f:
    np.lib.format.write_array(f, np.arange(3, dtype=np.int32), version=(2, 0))
np.save(d + "/np_fortran.npy", np.asfortranarray(np.ones((2, 3), dtype=np.float32)))
print("ok")
)", &out);
  ASSERT_EQ(rc, 0) << out;
  Tensor a = read_npy(d / "np_f32.npy");  // [4,3], a[i][j] = j*4 + i
  ASSERT_EQ(a.shape(), Shape({4, 3}));
  EXPECT_EQ(a.data<float>()[1], 4.0f);
  EXPECT_EQ(a.data<float>()[3], 1.0f);
  Tensor b = read_npy(d / "np_i64.npy");
  EXPECT_EQ(b.data<int64_t>()[0], -1);
  EXPECT_EQ(b.data<int64_t>()[1], int64_t(1) << 40);
  Tensor c = read_npy(d / "np_bool.npy");
  EXPECT_EQ(c.shape(), Shape({1, 2}));
  EXPECT_TRUE(c.data<bool>()[0]);
  EXPECT_FALSE(c.data<bool>()[1]);
  Tensor h = read_npy(d / "np_f16.npy");
  EXPECT_EQ(static_cast<uint16_t*>(h.raw())[0], 0x3800);  // 0.5
  EXPECT_EQ(static_cast<uint16_t*>(h.raw())[1], 0xc000);  // -2
  Tensor s = read_npy(d / "np_scalar.npy");
  EXPECT_EQ(s.ndim(), 0);
  EXPECT_EQ(s.data<double>()[0], 3.25);
  Tensor v2 = read_npy(d / "np_v2.npy");
  EXPECT_EQ(v2.data<int32_t>()[2], 2);
  EXPECT_ERROR_CONTAINS(read_npy(d / "np_fortran.npy"), "Fortran");
}

TEST(Interop, SafeTensorsWrittenByPythonAndReadBackByPython) {
  if (!have_python_module("numpy")) GTEST_SKIP() << "/usr/bin/python3 with numpy not available";
  TempDir d;
  const std::string dir = d.path.string();
  // Our writer -> Python hand-parser (struct + json + numpy) checks the bytes.
  write_safetensors(d / "ours.safetensors",
                    {{"w", patterned({3, 4}, DType::f32)}, {"ids", patterned({5}, DType::i64)},
                     {"h", patterned({3}, DType::f16)}, {"m", patterned({2}, DType::boolean)}});
  // A Python writer following the format by hand (padding-free header, HF-style metadata),
  // with BF16 through torch when it is installed.
  std::string out;
  int rc = run_python(d, R"(
import json, struct, numpy as np
d = ")" + dir + R"("
raw = open(d + "/ours.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
assert n % 8 == 0 and hdr["__metadata__"] == {"format": "pt"}, hdr
data = raw[8 + n:]
for name, dt in [("w", "<f4"), ("ids", "<i8"), ("h", "<f2"), ("m", "|b1")]:
    b, e = hdr[name]["data_offsets"]
    a = np.frombuffer(data[b:e], dtype=dt).reshape(hdr[name]["shape"])
    assert a.nbytes == e - b
w = np.frombuffer(data[slice(*hdr["w"]["data_offsets"])], dtype=np.uint8)
assert list(w[:4]) == [0, 7, 14, 21], list(w[:4])

tensors = {
    "emb": ("F32", [2, 3], (np.arange(6, dtype=np.float32) - 2.5).tobytes()),
    "pos": ("I64", [4], np.array([0, 1, -5, 2**50], dtype=np.int64).tobytes()),
    "half": ("F16", [2], np.array([1.5, -0.25], dtype=np.float16).tobytes()),
    "flag": ("BOOL", [3], np.array([True, False, True]).tobytes()),
    "byte": ("U8", [3], bytes([1, 2, 3])),
    "ln": ("F64", [], np.float64(-7.125).tobytes()),
}
try:
    import torch
    tensors["bf"] = ("BF16", [2], torch.tensor([1.0, -3.5], dtype=torch.bfloat16).view(torch.int16).numpy().tobytes())
except Exception:
    tensors["bf"] = ("BF16", [2], np.array([0x3f80, 0xc060], dtype=np.uint16).tobytes())
header, blob = {"__metadata__": {"format": "pt", "source": "python"}}, b""
for name in sorted(tensors):
    dt, shape, b = tensors[name]
    header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(b)]}
    blob += b
h = json.dumps(header).encode()
open(d + "/py.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + blob)
print("ok")
)", &out);
  ASSERT_EQ(rc, 0) << out;
  SafeTensorsFile f = SafeTensorsFile::open(d / "py.safetensors");
  EXPECT_EQ(f.metadata().at("source"), "python");
  Tensor emb = f.tensor("emb");
  EXPECT_EQ(emb.shape(), Shape({2, 3}));
  EXPECT_EQ(emb.data<float>()[0], -2.5f);
  EXPECT_EQ(emb.data<float>()[5], 2.5f);
  Tensor pos = f.tensor("pos");  // the Python writer does not align data: this is a copy
  EXPECT_EQ(pos.data<int64_t>()[2], -5);
  EXPECT_EQ(pos.data<int64_t>()[3], int64_t(1) << 50);
  EXPECT_EQ(static_cast<uint16_t*>(f.tensor("half").raw())[0], 0x3e00);  // 1.5
  EXPECT_EQ(static_cast<uint16_t*>(f.tensor("bf").raw())[0], 0x3f80);    // 1.0
  EXPECT_EQ(static_cast<uint16_t*>(f.tensor("bf").raw())[1], 0xc060);    // -3.5
  EXPECT_TRUE(f.tensor("flag").data<bool>()[2]);
  EXPECT_EQ(f.tensor("byte").data<uint8_t>()[1], 2);
  Tensor ln = f.tensor("ln");
  EXPECT_EQ(ln.ndim(), 0);
  EXPECT_EQ(ln.data<double>()[0], -7.125);
}
