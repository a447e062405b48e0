// app/model_dir.h: loading a HF model directory's tokenizer next to its weights.
#pragma once
#include <string>

#include "data/text/wordpiece.h"

namespace unmask::cli {

/// vocab.txt plus the casing options of tokenizer_config.json (do_lower_case, strip_accents;
/// HF's defaults when absent: lower case, accents follow the casing). A vocabulary whose size
/// is not the model's vocab_size (or that size rounded up to a multiple of 8, 64 or 128, as NVIDIA
/// DLE and Megatron pad it) is refused: it belongs to another model, and its ids would mean
/// other tokens.
text::WordPieceTokenizer load_tokenizer(const std::string& dir, int64_t model_vocab_size);

}  // namespace unmask::cli
