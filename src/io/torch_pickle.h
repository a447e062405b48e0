// io/torch_pickle.h: read PyTorch checkpoints (torch.save, zip format of torch >= 1.6) without Python.
//
// A torch.save file is a zip archive whose entries are STORED (uncompressed, 64-byte aligned):
//   <archive>/data.pkl        the pickled object (protocol 2)
//   <archive>/data/<key>      one entry per storage: its raw little-endian bytes
//   <archive>/version, <archive>/byteorder (newer torch)
// data.pkl is run on a minimal pickle machine that knows exactly what torch.save emits for state
// dicts: dicts / OrderedDicts, lists, tuples, str, bytes, int, float, bool, None, the
// persistent-id storage tuples ('storage', torch.FloatStorage, key, location, numel) and
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter. Anything else (argparse.Namespace args,
// numpy scalars, user classes) becomes an opaque object: never executed, reported in `other`,
// an error only when a tensor depends on it. An object whose pickled state is a dict (a whole
// nn.Module, as torch.save(model) writes it: OpenAI's DALL-E encoder.pkl) has that state walked
// like a dict, so its tensors come out under paths such as
// {"_modules", "blocks", "_modules", "input", "_parameters", "w"}. Storages of f32 / f16 / bf16 / f64 become f32
// tensors (f32, contiguous and aligned: a zero-copy read-only view of the file); i64 / i32 / u8 /
// bool keep their dtype. Views with offsets or general strides (a transposed weight, shared
// storages) are copied out element by element. The legacy non-zip format (torch < 1.6 or
// _use_new_zipfile_serialization=False: five pickles, then the storages' raw bytes) is read
// too; the oldest tar format is refused with a hint to re-save it.
//
// Every malformed input is an Error naming the file and what is wrong (offset, entry, tensor).
//
//   auto ckpt = unmask::io::read_torch_checkpoint("videomae_vit_b_k400.pth");
//   std::string from;
//   auto sd = unmask::io::torch_state_dict(ckpt, &from);   // {'model': sd} -> sd, from = "model"
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "unmask/tensor.h"

namespace unmask::io {

/// One tensor of a checkpoint, found under a path of dict keys (list indices, attribute names).
struct TorchTensor {
  std::vector<std::string> path;  // e.g. {"model", "encoder.blocks.0.attn.qkv.weight"}
  Tensor tensor;                  // f32 for floating storages; i64 / i32 / u8 / bool as stored
  DType stored = DType::f32;      // the storage's element type before conversion
};

struct TorchCheckpoint {
  std::string origin;                // the file (or the name given to parse)
  std::vector<TorchTensor> tensors;  // every reachable tensor, in pickle order
  /// Non-tensor leaves, one line each: "epoch: int 3", "args: argparse.Namespace", ...
  std::vector<std::string> other;
};

/// Memory-maps and parses a torch.save file. Errors name the path.
TorchCheckpoint read_torch_checkpoint(const std::string& path);
/// Parses an in-memory image (tests, fuzzer); zero-copy tensors keep `bytes` alive.
TorchCheckpoint parse_torch_checkpoint(std::shared_ptr<const uint8_t> bytes, size_t size, const std::string& origin);

/// Whether the first bytes look like a torch.save file: a zip ("PK\3\4") or the legacy pickle
/// format (a pickle PROTO opcode, or a tar archive). Used to pick the reader for a path.
bool looks_like_torch_file(const uint8_t* head, size_t size);

/// The model state dict of a checkpoint: the tensors under the first of the top-level keys
/// "model", "module", "state_dict", "model_state" that holds tensors (VideoMAE saves {'model': sd},
/// DeepSpeed {'module': sd}), else the top-level tensors; names are the remaining path joined
/// by '.'; for a pickled nn.Module, its tensors under _modules / _parameters / _buffers with the
/// whole path (*from = "(a pickled module)"). Tensors under other keys (optimizer state, model_ema) are left out and, when
/// `ignored` is given, listed there. *from receives the chosen key ("" = top level).
std::vector<std::pair<std::string, Tensor>> torch_state_dict(const TorchCheckpoint& checkpoint,
                                                             std::string* from = nullptr,
                                                             std::vector<std::string>* ignored = nullptr);

}  // namespace unmask::io
