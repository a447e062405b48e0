// data/text/shard_io.cc: DLE HDF5 pretraining shards (reference/bert.md 1.3), read and written with
// the HDF5 C API.
//
// Writing builds the whole file in memory (the "core" driver without a backing store), takes
// its image with H5Fget_file_image and hands the bytes to io::write_file_atomic: a crash never
// leaves a torn shard, and no HDF5 file is ever open on the final path. The gzip compression,
// most of the work, runs chunk by chunk on several threads outside the HDF5 lock (zlib's
// compress2, the format of HDF5's deflate filter) and the chunks are stored with
// H5Dwrite_chunk, so readers (h5py, DLE) see ordinary gzip-filtered chunks.
#include <hdf5.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "data/text/parallel.h"
#include "data/text/pretrain_data.h"
#include "data/text/shard_io.h"
#include "io/file.h"
#include "unmask/error.h"

namespace unmask::data {

namespace {

struct DatasetSpec {
  const char* name;
  int rank;
  bool wide;  // write_shard stores i4 (true) or i1 (false), DLE's h5py dtypes
  hid_t file_type() const { return wide ? H5T_STD_I32LE : H5T_STD_I8LE; }
};

// DLE's create_pretraining_data.py: i4 for ids and positions, i1 for masks, segments, labels.
const DatasetSpec kDatasets[] = {
    {"input_ids", 2, true},     {"input_mask", 2, false},    {"segment_ids", 2, false},
    {"masked_lm_positions", 2, true}, {"masked_lm_ids", 2, true}, {"next_sentence_labels", 1, false},
};
constexpr const char* kKeyList =
    "input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids, next_sentence_labels";

// Closes an HDF5 id on scope exit.
class H5Id {
 public:
  H5Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Id() {
    if (id_ >= 0) close_(id_);
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// HDF5 1.10's thread-safe build keeps the error-printing setting per thread, so each entry
// point switches it off for the calling thread.
void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string class_name(H5T_class_t c, size_t bytes) {
  const char* name = "unknown";
  switch (c) {
    case H5T_INTEGER: name = "integer"; break;
    case H5T_FLOAT: name = "float"; break;
    case H5T_STRING: name = "string"; break;
    case H5T_BITFIELD: name = "bitfield"; break;
    case H5T_OPAQUE: name = "opaque"; break;
    case H5T_COMPOUND: name = "compound"; break;
    case H5T_REFERENCE: name = "reference"; break;
    case H5T_ENUM: name = "enum"; break;
    case H5T_VLEN: name = "variable-length"; break;
    case H5T_ARRAY: name = "array"; break;
    default: break;
  }
  return std::string(name) + " (" + std::to_string(bytes * 8) + "-bit)";
}

// The names in the file's root group, for "missing key" messages.
std::string root_names(hid_t file) {
  H5G_info_t info{};
  if (H5Gget_info(file, &info) < 0) return "?";
  std::string out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[256] = {};
    if (H5Lget_name_by_idx(file, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT) < 0) continue;
    out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out.empty() ? "nothing" : out;
}

struct OpenShard {
  std::string path;
  std::unique_ptr<H5Id> file;
  std::vector<std::unique_ptr<H5Id>> datasets;  // in kDatasets order
  ShardInfo info;
};

// Opens every dataset and checks presence, type class, rank and the shared dimensions.
OpenShard open_shard(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error("shard ", path, " does not exist", Hint("check the path"));
  if (S_ISDIR(st.st_mode)) throw Error("shard ", path, " is a directory", Hint("use list_shards(dir) / pass the files"));
  OpenShard s;
  s.path = path;
  if (H5Fis_hdf5(path.c_str()) <= 0)
    throw Error("shard ", path, " is not an HDF5 file",
                Hint("pass shards written by `unmask prepare-text` or DLE's create_pretraining_data.py"));
  s.file = std::make_unique<H5Id>(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!s.file->ok()) throw Error("cannot open HDF5 shard ", path, Hint("the file may be truncated or unreadable"));
  int64_t dims_seen[6][2] = {};
  for (size_t k = 0; k < std::size(kDatasets); ++k) {
    const DatasetSpec& spec = kDatasets[k];
    if (H5Lexists(s.file->get(), spec.name, H5P_DEFAULT) <= 0)
      throw Error("shard ", path, " has no dataset '", spec.name, "' (it holds: ", root_names(s.file->get()), ")",
                  Hint(std::string("a DLE pretraining shard holds ") + kKeyList));
    auto ds = std::make_unique<H5Id>(H5Dopen2(s.file->get(), spec.name, H5P_DEFAULT), H5Dclose);
    if (!ds->ok()) throw Error("shard ", path, ": '", spec.name, "' is not a dataset");
    H5Id type(H5Dget_type(ds->get()), H5Tclose);
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls != H5T_INTEGER)
      throw Error("shard ", path, ": dataset '", spec.name, "' has type ", class_name(cls, H5Tget_size(type.get())),
                  ", expected an integer type (DLE writes ", spec.wide ? "i4" : "i1", ")");
    H5Id space(H5Dget_space(ds->get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank != spec.rank)
      throw Error("shard ", path, ": dataset '", spec.name, "' has rank ", rank, ", expected ", spec.rank,
                  spec.rank == 2 ? " ([instances, length])" : " ([instances])");
    hsize_t dims[2] = {0, 0};
    H5Sget_simple_extent_dims(space.get(), dims, nullptr);
    dims_seen[k][0] = int64_t(dims[0]);
    dims_seen[k][1] = int64_t(dims[1]);
    if (dims_seen[k][0] != dims_seen[0][0])
      throw Error("shard ", path, " is ragged: '", spec.name, "' has ", dims_seen[k][0], " rows but 'input_ids' has ",
                  dims_seen[0][0], Hint("every dataset of a shard holds one row per instance; rewrite the shard"));
    s.datasets.push_back(std::move(ds));
  }
  auto same_width = [&](size_t k, size_t ref) {
    if (dims_seen[k][1] != dims_seen[ref][1])
      throw Error("shard ", path, " is ragged: '", kDatasets[k].name, "' has ", dims_seen[k][1], " columns but '",
                  kDatasets[ref].name, "' has ", dims_seen[ref][1]);
  };
  same_width(1, 0);
  same_width(2, 0);
  same_width(4, 3);
  s.info = {dims_seen[0][0], dims_seen[0][1], dims_seen[3][1]};
  if (s.info.seq_length < 1) throw Error("shard ", path, ": input_ids has 0 columns (sequence length 0)");
  return s;
}

void read_ints(const OpenShard& s, size_t k, std::vector<int32_t>& out, int64_t count) {
  out.assign(size_t(count), 0);
  if (count == 0) return;
  // HDF5 converts any integer type on disk (i1..i8, unsigned) to int32 in memory.
  if (H5Dread(s.datasets[k]->get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw Error("shard ", s.path, ": reading dataset '", kDatasets[k].name, "' failed",
                Hint("the file may be truncated or corrupt"));
}

// Checks the values the trainer relies on.
void check_values(const std::string& path, const PretrainShard& sh) {
  const int64_t N = sh.num_instances, S = sh.seq_length, P = sh.max_predictions;
  auto where = [](int64_t r, int64_t c) { return "[" + std::to_string(r) + ", " + std::to_string(c) + "]"; };
  for (int64_t r = 0; r < N; ++r) {
    bool in_padding = false;
    for (int64_t c = 0; c < S; ++c) {
      const int32_t m = sh.input_mask[size_t(r * S + c)], seg = sh.segment_ids[size_t(r * S + c)];
      const int32_t id = sh.input_ids[size_t(r * S + c)];
      if (m != 0 && m != 1)
        throw Error("shard ", path, ": input_mask", where(r, c), " = ", m, ", expected 0 or 1");
      if (m == 1 && in_padding)
        throw Error("shard ", path, ": input_mask row ", r, " is not of the form 1...1 0...0 (a 1 at column ", c,
                    " after padding)");
      in_padding = in_padding || m == 0;
      if (seg != 0 && seg != 1) throw Error("shard ", path, ": segment_ids", where(r, c), " = ", seg, ", expected 0 or 1");
      if (id < 0) throw Error("shard ", path, ": input_ids", where(r, c), " = ", id, " is negative");
    }
    for (int64_t c = 0; c < P; ++c) {
      const int32_t pos = sh.masked_lm_positions[size_t(r * P + c)], id = sh.masked_lm_ids[size_t(r * P + c)];
      if (pos < 0 || pos >= S)
        throw Error("shard ", path, ": masked_lm_positions", where(r, c), " = ", pos, " is outside [0, ", S,
                    ") (the sequence length)");
      if (id < 0) throw Error("shard ", path, ": masked_lm_ids", where(r, c), " = ", id, " is negative");
    }
    const int32_t label = sh.next_sentence_labels[size_t(r)];
    if (label != 0 && label != 1)
      throw Error("shard ", path, ": next_sentence_labels[", r, "] = ", label, ", expected 0 or 1");
  }
}

// zlib's compress2 at level 4 (a zlib stream: what HDF5's deflate filter writes and reads),
// with the deflate state and buffers kept per thread: compress2 allocates and clears about
// 270 KB of state per call, which cost as much as compressing a 256 KB chunk.
class ChunkDeflater {
 public:
  ChunkDeflater() {
    std::memset(&z_, 0, sizeof z_);
    ok_ = deflateInit(&z_, 4) == Z_OK;
  }
  ~ChunkDeflater() {
    if (ok_) deflateEnd(&z_);
  }
  ChunkDeflater(const ChunkDeflater&) = delete;
  ChunkDeflater& operator=(const ChunkDeflater&) = delete;
  bool compress(const void* in, size_t n, std::string& out) {
    if (!ok_ || deflateReset(&z_) != Z_OK) return false;
    buffer_.resize(deflateBound(&z_, uLong(n)));
    z_.next_in = static_cast<Bytef*>(const_cast<void*>(in));
    z_.avail_in = uInt(n);
    z_.next_out = reinterpret_cast<Bytef*>(buffer_.data());
    z_.avail_out = uInt(buffer_.size());
    if (deflate(&z_, Z_FINISH) != Z_STREAM_END) return false;
    out.assign(buffer_.data(), buffer_.size() - z_.avail_out);
    return true;
  }
  std::string raw;  // the caller's uncompressed chunk, reused

 private:
  z_stream z_;
  std::string buffer_;
  bool ok_ = false;
};

}  // namespace

std::mutex& hdf5_lock() {
  static std::mutex m;
  return m;
}

ShardInfo inspect_shard(const std::string& path) {
  std::lock_guard<std::mutex> lock(hdf5_lock());
  quiet_hdf5();
  return open_shard(path).info;
}

PretrainShard read_shard(const std::string& path) {
  PretrainShard sh;
  {
    std::lock_guard<std::mutex> lock(hdf5_lock());
    quiet_hdf5();
    OpenShard s = open_shard(path);
    sh.num_instances = s.info.num_instances;
    sh.seq_length = s.info.seq_length;
    sh.max_predictions = s.info.max_predictions;
    const int64_t NS = sh.num_instances * sh.seq_length, NP = sh.num_instances * sh.max_predictions;
    read_ints(s, 0, sh.input_ids, NS);
    read_ints(s, 1, sh.input_mask, NS);
    read_ints(s, 2, sh.segment_ids, NS);
    read_ints(s, 3, sh.masked_lm_positions, NP);
    read_ints(s, 4, sh.masked_lm_ids, NP);
    read_ints(s, 5, sh.next_sentence_labels, sh.num_instances);
  }
  check_values(path, sh);
  return sh;
}

void write_shard(const std::string& path, const PretrainShard& shard) { write_shard(path, shard, 1); }

void write_shard(const std::string& path, const PretrainShard& shard, int num_threads) {
  static_assert(std::endian::native == std::endian::little, "chunks are written in the file's byte order (LE)");
  const int64_t N = shard.num_instances, S = shard.seq_length, P = shard.max_predictions;
  UNMASK_CHECK(N >= 0 && S >= 1 && P >= 0, "write_shard: bad sizes N=", N, " S=", S, " P=", P);
  const std::vector<int32_t>* data[] = {&shard.input_ids,           &shard.input_mask,    &shard.segment_ids,
                                        &shard.masked_lm_positions, &shard.masked_lm_ids, &shard.next_sentence_labels};
  const int64_t widths[] = {S, S, S, P, P, 1};
  constexpr size_t kNumDatasets = std::size(kDatasets);
  for (size_t k = 0; k < kNumDatasets; ++k)
    UNMASK_CHECK(int64_t(data[k]->size()) == N * widths[k], "write_shard: ", kDatasets[k].name, " has ",
                 data[k]->size(), " values, expected ", N, " x ", widths[k]);
  check_values(path, shard);

  // Chunks of about 256 KB of whole rows. The chunks are converted to the file type and
  // deflated (zlib, level 4: h5py's compression='gzip' default, the stream HDF5's deflate
  // filter reads) on num_threads threads, then stored as they are with H5Dwrite_chunk.
  struct Chunked {
    int64_t rows_per_chunk = 1, num_chunks = 0, elem = 4, width = 1;
    std::vector<std::string> chunks;  // compressed
  };
  Chunked layout[kNumDatasets];
  std::vector<std::pair<size_t, int64_t>> tasks;  // (dataset, chunk)
  for (size_t k = 0; k < kNumDatasets; ++k) {
    Chunked& c = layout[k];
    c.elem = kDatasets[k].wide ? 4 : 1;
    c.width = std::max<int64_t>(1, widths[k]);
    c.rows_per_chunk = std::clamp<int64_t>((int64_t(256) << 10) / (c.width * c.elem), 1, std::max<int64_t>(1, N));
    c.num_chunks = widths[k] == 0 ? 0 : (N + c.rows_per_chunk - 1) / c.rows_per_chunk;
    c.chunks.resize(size_t(c.num_chunks));
    for (int64_t i = 0; i < c.num_chunks; ++i) tasks.emplace_back(k, i);
  }
  parallel_chunks(int64_t(tasks.size()), 1, std::max(1, num_threads), [&](int64_t t, int64_t) {
    const auto [k, i] = tasks[size_t(t)];
    Chunked& c = layout[k];
    // An edge chunk is stored at full size, zero-padded past the dataset's last row.
    const int64_t values = c.rows_per_chunk * c.width;
    const int64_t first = i * values, count = std::min(values, N * c.width - first);
    thread_local ChunkDeflater deflater;
    std::string& raw = deflater.raw;
    raw.resize(size_t(values * c.elem));
    const int32_t* src = data[k]->data() + first;
    if (c.elem == 4)
      std::memcpy(raw.data(), src, size_t(count) * 4);
    else
      for (int64_t j = 0; j < count; ++j) raw[size_t(j)] = char(int8_t(src[j]));  // checked to be 0/1 above
    std::memset(raw.data() + count * c.elem, 0, size_t((values - count) * c.elem));
    if (!deflater.compress(raw.data(), raw.size(), c.chunks[size_t(i)]))
      throw Error("write_shard: zlib failed on a chunk of '", kDatasets[k].name, "' for ", path);
  });

  std::string image;
  {
    std::lock_guard<std::mutex> lock(hdf5_lock());
    quiet_hdf5();
    H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5Pset_fapl_core(fapl.get(), size_t(4) << 20, /*backing_store=*/0);
    H5Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    if (!file.ok()) throw Error("write_shard: cannot create an in-memory HDF5 file for ", path);
    for (size_t k = 0; k < kNumDatasets; ++k) {
      const DatasetSpec& spec = kDatasets[k];
      const Chunked& c = layout[k];
      hsize_t dims[2] = {hsize_t(N), hsize_t(widths[k])}, maxdims[2] = {hsize_t(N), hsize_t(widths[k])};
      // An empty shard still needs a chunk of at least one row: let the first axis grow.
      if (N == 0) maxdims[0] = H5S_UNLIMITED;
      H5Id space(H5Screate_simple(spec.rank, dims, maxdims), H5Sclose);
      hsize_t chunk[2] = {hsize_t(c.rows_per_chunk), hsize_t(c.width)};
      H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      H5Pset_chunk(dcpl.get(), spec.rank, chunk);
      H5Pset_deflate(dcpl.get(), 4);
      H5Pset_obj_track_times(dcpl.get(), 0);  // no timestamps: a seed gives byte-identical shards
      H5Id ds(H5Dcreate2(file.get(), spec.name, spec.file_type(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
              H5Dclose);
      if (!ds.ok()) throw Error("write_shard: cannot create dataset '", spec.name, "' for ", path);
      for (int64_t i = 0; i < c.num_chunks; ++i) {
        const hsize_t offset[2] = {hsize_t(i * c.rows_per_chunk), 0};
        const std::string& bytes = c.chunks[size_t(i)];
        if (H5Dwrite_chunk(ds.get(), H5P_DEFAULT, /*filters applied: all*/ 0, offset, bytes.size(), bytes.data()) < 0)
          throw Error("write_shard: writing dataset '", spec.name, "' for ", path, " failed");
      }
    }
    H5Fflush(file.get(), H5F_SCOPE_GLOBAL);
    const ssize_t size = H5Fget_file_image(file.get(), nullptr, 0);
    if (size <= 0) throw Error("write_shard: cannot take the HDF5 file image for ", path);
    image.resize(size_t(size));
    if (H5Fget_file_image(file.get(), image.data(), image.size()) != size)
      throw Error("write_shard: cannot take the HDF5 file image for ", path);
  }
  io::write_file_atomic(path, image);
}

std::vector<std::string> list_shards(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw Error("shard path ", path, " does not exist", Hint("run `unmask prepare-text` first"));
  if (!fs::is_directory(st)) return {path};
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string ext = e.path().extension().string();
    if ((ext == ".hdf5" || ext == ".h5") && e.is_regular_file()) out.push_back(e.path().string());
  }
  if (ec) throw Error("cannot list ", path, ": ", ec.message());
  if (out.empty())
    throw Error("no shards (*.hdf5, *.h5) in ", path, Hint("run `unmask prepare-text --output " + path + "` first"));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace unmask::data
