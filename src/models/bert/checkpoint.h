// models/bert/checkpoint.h: a BERT checkpoint in any layout its users have, found from one path.
//
//   BertCheckpoint c = open_bert_checkpoint("models/bert-base-uncased");  // or a file, a DLE dir
//   auto w = bert_weights_from_files(c.config, std::move(c.files), c.origin);
//
// The path may be:
//   - a Hugging Face directory: config.json with model.safetensors (or its index of shards), or
//     pytorch_model.bin (torch.save zip or legacy format, or the shards of
//     pytorch_model.bin.index.json), read by io/torch_pickle.h: no Python;
//   - an NVIDIA DLE directory: bert_config.json with ckpt_<step>.pt ({"model": state_dict}; the
//     highest step is taken); DLE's `dense_act` names are its `dense`; its "gelu" is the erf form
//     (x * 0.5 * (1 + erf(x / 1.41421)) in DLE's modeling.py), as HF's: the config is taken as is;
//   - one weights file (.safetensors, .bin, .pt, .pth): the config beside it.
// A training run directory (checkpoints/step-*), a Hugging Face Hub id (nothing is downloaded)
// and a directory without a config are refused with what to pass instead.
#pragma once
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "unmask/bert.h"

namespace unmask {

struct BertCheckpoint {
  std::string dir;       // the directory of the config, vocab.txt and tokenizer files
  std::string origin;    // the weights, as messages name them
  std::string layout;    // "safetensors", "pytorch_model.bin", "DLE ckpt_*.pt", ...
  BertConfig config;
  std::vector<io::SafeTensorsFile> files;  // torch files converted in memory
  std::vector<std::string> notes;          // how the checkpoint was read (DLE names), for the user
};

/// Resolves `path` and reads the config and the weights. Errors name the path and what to do.
BertCheckpoint open_bert_checkpoint(const std::string& path);
/// The config only (cheap; the same resolution).
BertConfig read_bert_checkpoint_config(const std::string& path);
/// The directory holding the config and tokenizer files of the checkpoint at `path`.
std::string bert_checkpoint_dir(const std::string& path);

}  // namespace unmask
