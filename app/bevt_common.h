// app/bevt_common.h: the options every BEVT command shares: the model's size and the tokenizer.
#pragma once
#include <string>
#include <vector>

#include "cli.h"
#include "data/video/bevt_data.h"
#include "models/bevt/backbone.h"
#include "models/bevt/dvae.h"

namespace unmask::cli {

/// --size, --embed-dim, --depths, --heads, --window, --vocab.
std::vector<OptionSpec> bevt_model_specs();
/// The Swin sizes: the preset of --size with the others overriding it (validated).
bevt::SwinConfig bevt_swin_config(const Args& args);

/// --data, --image-data, --root, --frame-interval, --workers (`default_workers` decoding threads).
std::vector<OptionSpec> bevt_data_specs(const char* default_workers);
/// --frame-interval and --workers into `data` (validated).
void read_bevt_data_options(const Args& args, video::BevtDataOptions& data);

/// --tokenizer FILE, or a random tokenizer of --tokenizer-hidden / --tokenizer-blocks.
std::vector<OptionSpec> bevt_tokenizer_specs();
/// The tokenizer of --tokenizer, or a random one (its vocabulary --vocab) from `seed`, with an
/// output bias that spreads its ids (a random encoder's plain argmax picks one id for most cells).
/// *what says which ("DALL-E encoder from F" / "random tokenizer (hidden 16, ...)").
bevt::DalleEncoder bevt_tokenizer(const Args& args, int64_t vocab, uint64_t seed, std::string* what);

}  // namespace unmask::cli
