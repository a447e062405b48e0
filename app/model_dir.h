// app/model_dir.h: loading a HF model directory's tokenizer next to its weights.
#pragma once
#include <string>

#include "text/wordpiece.h"

namespace unmask::cli {

/// vocab.txt plus the casing options of tokenizer_config.json (do_lower_case, strip_accents;
/// HF's defaults when absent: lower case, accents follow the casing).
text::WordPieceTokenizer load_tokenizer(const std::string& dir);

}  // namespace unmask::cli
