// io/safetensors.h: read (memory-mapped, fully validated) and write safetensors files.
//
// Format: u64 little-endian header length N, N bytes of UTF-8 JSON
// {name: {"dtype": "F32"|"F16"|"BF16"|"I64"|..., "shape": [...], "data_offsets": [b, e]}, ...,
//  "__metadata__": {str: str}}, then the data; offsets are relative to the byte after the
// header. Every inconsistency (header past the end, not JSON, unknown dtype, offsets out of
// range or overlapping, byte count disagreeing with the shape) throws an Error naming the
// file and the tensor, with a hint.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "unmask/tensor.h"

namespace unmask::io {

struct SafeTensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets relative to the data section
};

class SafeTensorsFile {
 public:
  /// Memory-maps `path` read-only and validates the whole header.
  static SafeTensorsFile open(const std::string& path);
  /// Parses an in-memory image (used by the fuzzer and tests); `origin` names it in errors.
  static SafeTensorsFile parse(std::shared_ptr<const uint8_t> bytes, size_t size,
                               const std::string& origin);
  /// An in-memory image of `tensors` (CPU), for weights read from another format (torch.save):
  /// the loaders then see one kind of file. `origin` names it in errors.
  static SafeTensorsFile from_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                      const std::string& origin);

  const std::string& path() const { return origin_; }
  const std::vector<SafeTensorInfo>& tensors() const { return tensors_; }
  const SafeTensorInfo* find(std::string_view name) const;  // null if absent
  /// A read-only CPU view of the stored bytes with the stored dtype (keeps the mapping alive).
  /// Data is little-endian; unaligned data is copied into an aligned owned tensor.
  Tensor tensor(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Whether p points into this file's bytes (a zero-copy view from tensor(), not a copy).
  bool contains(const void* p) const {
    auto* b = reinterpret_cast<uintptr_t>(p) >= reinterpret_cast<uintptr_t>(bytes_.get()) ? static_cast<const uint8_t*>(p) : nullptr;
    return b && b < bytes_.get() + size_;
  }

 private:
  std::string origin_;
  std::shared_ptr<const uint8_t> bytes_;  // whole file
  size_t size_ = 0;
  size_t data_start_ = 0;
  std::vector<SafeTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// Writes tensors (any CPU tensors; non-contiguous ones are copied) atomically: a temporary
/// file in the same directory, fsync, rename. Names are written sorted, data 8-byte aligned.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

/// The shards a sharded checkpoint's index names (model.safetensors.index.json,
/// pytorch_model.bin.index.json: "weight_map" {tensor: file beside the index}), each opened once
/// by `open_shard` in first-seen order, and every tensor of the index checked to be in its shard
/// (under `stored_name(tensor)` when given: the name the opened shard gives it). Errors name the
/// index and what is wrong (not JSON, no weight_map, a path that is not a plain file name, a
/// missing shard, a tensor its shard lacks).
std::vector<SafeTensorsFile> open_indexed_shards(const std::string& index_file,
                                                 const std::function<SafeTensorsFile(const std::string&)>& open_shard,
                                                 const std::function<std::string(const std::string&)>& stored_name = {});

/// Opens a model's weights from a directory: model.safetensors, or the shards listed in
/// model.safetensors.index.json ("weight_map"). Errors name the directory and what is missing.
std::vector<SafeTensorsFile> open_model_weights(const std::string& dir);

}  // namespace unmask::io
