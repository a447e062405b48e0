// models/videomae/names.cc: original <-> HF VideoMAE state-dict names (see videomae_names.h).
#include "models/videomae/names.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include "core/half.h"

namespace unmask::video {
namespace {

// Per-block renames (original suffix, HF suffix), qkv excepted.
constexpr std::pair<std::string_view, std::string_view> kBlockRenames[] = {
    {"norm1.weight", "layernorm_before.weight"},
    {"norm1.bias", "layernorm_before.bias"},
    {"attn.q_bias", "attention.attention.q_bias"},
    {"attn.v_bias", "attention.attention.v_bias"},
    {"attn.proj.weight", "attention.output.dense.weight"},
    {"attn.proj.bias", "attention.output.dense.bias"},
    {"norm2.weight", "layernorm_after.weight"},
    {"norm2.bias", "layernorm_after.bias"},
    {"mlp.fc1.weight", "intermediate.dense.weight"},
    {"mlp.fc1.bias", "intermediate.dense.bias"},
    {"mlp.fc2.weight", "output.dense.weight"},
    {"mlp.fc2.bias", "output.dense.bias"},
};

// Top-level renames (original without the `encoder.` prefix, HF).
constexpr std::pair<std::string_view, std::string_view> kTopRenames[] = {
    {"patch_embed.proj.weight", "videomae.embeddings.patch_embeddings.projection.weight"},
    {"patch_embed.proj.bias", "videomae.embeddings.patch_embeddings.projection.bias"},
    {"norm.weight", "videomae.layernorm.weight"},
    {"norm.bias", "videomae.layernorm.bias"},
};
// Names outside the encoder, the same in both conventions except the classifier.
constexpr std::pair<std::string_view, std::string_view> kOuterRenames[] = {
    {"encoder_to_decoder.weight", "encoder_to_decoder.weight"},
    {"mask_token", "mask_token"},
    {"decoder.norm.weight", "decoder.norm.weight"},
    {"decoder.norm.bias", "decoder.norm.bias"},
    {"decoder.head.weight", "decoder.head.weight"},
    {"decoder.head.bias", "decoder.head.bias"},
    {"fc_norm.weight", "fc_norm.weight"},
    {"fc_norm.bias", "fc_norm.bias"},
    {"head.weight", "classifier.weight"},
    {"head.bias", "classifier.bias"},
};

constexpr std::string_view kQkv = "attn.qkv.weight";
constexpr std::string_view kHfProj[3] = {"attention.attention.query.weight", "attention.attention.key.weight",
                                         "attention.attention.value.weight"};

bool strip(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}

// "<digits>.<rest>" -> (index, rest).
std::optional<std::pair<int64_t, std::string_view>> split_index(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && n < 9 && s[n] >= '0' && s[n] <= '9') ++n;
  if (n == 0 || n >= s.size() || s[n] != '.') return std::nullopt;
  return std::make_pair(std::stoll(std::string(s.substr(0, n))), s.substr(n + 1));
}

template <size_t N>
std::optional<std::string_view> lookup(const std::pair<std::string_view, std::string_view> (&table)[N],
                                       std::string_view key, bool reverse) {
  for (const auto& [orig, hf] : table)
    if ((reverse ? hf : orig) == key) return reverse ? orig : hf;
  return std::nullopt;
}

std::string list_names(const std::vector<std::string>& names) {
  std::ostringstream os;
  for (size_t i = 0; i < names.size() && i < 24; ++i) os << (i ? ", " : "") << names[i];
  if (names.size() > 24) os << ", ... (" << names.size() - 24 << " more)";
  return os.str();
}

void throw_unknown(const char* who, const std::vector<std::string>& unknown, const char* hint) {
  throw Error(who, ": ", unknown.size(), " tensor name(s) have no counterpart: ", list_names(unknown), Hint(hint));
}

void check_no_duplicates(const NamedTensors& out, const char* who) {
  std::set<std::string> seen;
  std::vector<std::string> dups;
  for (const auto& [name, t] : out)
    if (!seen.insert(name).second) dups.push_back(name);
  if (!dups.empty())
    throw Error(who, ": several input tensors map to the same name: ", list_names(dups),
                Hint("the state dict mixes pretrain (encoder.-prefixed) and fine-tune names; keep one"));
}

// Max |t - sinusoid| for a [1, n, d] or [n, d] table stored in f32, f16 or bf16.
double sinusoid_distance(const Tensor& t) {
  const Tensor c = t.contiguous();
  const int64_t n = c.size(-2), d = c.size(-1);
  auto value = [&](int64_t i) -> double {
    switch (c.dtype()) {
      case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(c.raw())[i]);
      case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(c.raw())[i]);
      default: return c.data<float>()[i];
    }
  };
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const double angle = double(i) / std::pow(10000.0, 2.0 * double(j / 2) / double(d));
      const double ref = (j % 2 == 0) ? std::sin(angle) : std::cos(angle);
      worst = std::max(worst, std::fabs(value(i * d + j) - ref));
    }
  return worst;
}

// How far a stored fixed table may be from the float64 sinusoid: the rounding of its dtype on
// values in [-1, 1] (half an ulp at 1: f16 2^-11, bf16 2^-8) plus f32 evaluation slack.
double sinusoid_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16: return 1e-4 + std::ldexp(1.0, -11);
    case DType::bf16: return 1e-4 + std::ldexp(1.0, -8);
    default: return 1e-4;
  }
}

// Names of a bare HF VideoMAEModel (no `videomae.` prefix); no original name looks like these.
bool bare_hf_model_name(std::string_view n) {
  return n.rfind("encoder.layer.", 0) == 0 || n.rfind("embeddings.", 0) == 0 || n.rfind("layernorm.", 0) == 0;
}

bool is_pos_table_name(std::string_view name) {
  return name == "pos_embed" || name == "encoder.pos_embed" || name == "decoder.pos_embed";
}

bool all_zero(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.raw());
  // +0.0 in every float format is all-zero bytes; -0.0 also counts as zero.
  const size_t es = dtype_size(c.dtype());
  for (int64_t i = 0; i < c.numel(); ++i) {
    const unsigned char* e = p + size_t(i) * es;
    for (size_t b = 0; b < es; ++b) {
      const bool sign_byte = (b == es - 1);
      if ((sign_byte ? (e[b] & 0x7f) : e[b]) != 0) return false;
    }
  }
  return true;
}

// Fused [3A, D] from three [A, D] (same dtype).
Tensor fuse_rows(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t a = q.size(0), d = q.size(1);
  Tensor out = Tensor::empty({3 * a, d}, q.dtype());
  out.slice(0, 0, a).copy_from(q);
  out.slice(0, a, 2 * a).copy_from(k);
  out.slice(0, 2 * a, 3 * a).copy_from(v);
  return out;
}

struct BlockSeen {
  std::string where;  // the block's name prefix, for messages
  bool qkv = false, q_bias = false, v_bias = false;
  int64_t rows = -1;  // A of the projections
  int64_t q_bias_len = -1, v_bias_len = -1;
};

void check_biases(std::map<std::string, BlockSeen>& blocks, const char* who) {
  std::vector<std::string> problems;
  for (auto& [key, b] : blocks) {
    if (b.qkv && !b.q_bias) problems.push_back(b.where + " has no q_bias");
    if (b.qkv && !b.v_bias) problems.push_back(b.where + " has no v_bias");
    if (!b.qkv && (b.q_bias || b.v_bias)) problems.push_back(b.where + " has q_bias/v_bias but no qkv weights");
    if (b.qkv && b.q_bias && b.q_bias_len != b.rows)
      problems.push_back(b.where + " q_bias has " + std::to_string(b.q_bias_len) + " values, expected " +
                         std::to_string(b.rows));
    if (b.qkv && b.v_bias && b.v_bias_len != b.rows)
      problems.push_back(b.where + " v_bias has " + std::to_string(b.v_bias_len) + " values, expected " +
                         std::to_string(b.rows));
  }
  if (!problems.empty())
    throw Error(who, ": attention biases are inconsistent: ", list_names(problems),
                Hint("VideoMAE checkpoints carry q_bias and v_bias in every block; a model built with "
                     "qkv_bias=False must be given explicit zero q_bias/v_bias, never implicit ones"));
}

}  // namespace

VideoMAENaming detect_videomae_naming(const NamedTensors& tensors) {
  bool hf = false, original = false;
  for (const auto& [name, t] : tensors) {
    std::string_view s = name;
    if (s.rfind("videomae.", 0) == 0 || s.rfind("decoder.decoder_layers.", 0) == 0 || s.rfind("classifier.", 0) == 0 ||
        bare_hf_model_name(s))
      hf = true;
    else if (s.find("blocks.") != std::string_view::npos || s.find("patch_embed.") != std::string_view::npos)
      original = true;
  }
  if (hf && original)
    throw Error("videomae checkpoint: the names mix the original (blocks.*) and HF (videomae.*) conventions",
                Hint("convert the whole state dict from one convention"));
  if (!hf && !original)
    throw Error("videomae checkpoint: no VideoMAE tensor names found among ", tensors.size(), " tensors",
                Hint("expected original names (blocks.0.attn.qkv.weight) or HF names "
                     "(videomae.encoder.layer.0.attention.attention.query.weight)"));
  return hf ? VideoMAENaming::hf : VideoMAENaming::original;
}

NamedTensors videomae_original_to_hf(const NamedTensors& original, std::vector<std::string>* dropped) {
  constexpr const char* kWho = "videomae original -> HF";
  NamedTensors out;
  std::vector<std::string> unknown;
  std::map<std::string, BlockSeen> blocks;
  for (const auto& [name, t] : original) {
    std::string_view s = name;
    if (is_pos_table_name(s)) {
      // A fixed sinusoid table is implied by the architecture; a learned one cannot be carried.
      UNMASK_CHECK((t.dtype() == DType::f32 || t.dtype() == DType::f16 || t.dtype() == DType::bf16) &&
                       (t.ndim() == 2 || t.ndim() == 3),
                   kWho, ": ", name, " must be an f32/f16/bf16 [1, tokens, dim] table, got ", t.describe());
      const double dist = sinusoid_distance(t);
      if (dist > sinusoid_tolerance(t.dtype()))
        throw Error(kWho, ": ", name, " ", t.describe(), " differs from the fixed sinusoid table by up to ", dist,
                    "; HF VideoMAE has no learned positional embedding to hold it",
                    Hint("keep the original naming for checkpoints with learned positional tables"));
      if (dropped) dropped->push_back(name + " (fixed sinusoid table; HF recomputes it)");
      continue;
    }
    const bool enc_prefixed = strip(s, "encoder.");
    std::string hf_prefix;
    bool is_block = false;
    if (!enc_prefixed && strip(s, "decoder.blocks.")) {
      hf_prefix = "decoder.decoder_layers.";
      is_block = true;
    } else if (strip(s, "blocks.")) {
      hf_prefix = "videomae.encoder.layer.";
      is_block = true;
    }
    if (is_block) {
      const auto idx = split_index(s);
      if (!idx) {
        unknown.push_back(name);
        continue;
      }
      const std::string block = hf_prefix + std::to_string(idx->first) + ".";
      const std::string_view rest = idx->second;
      BlockSeen& seen = blocks[block];
      seen.where = name.substr(0, name.size() - rest.size() - 1);
      if (rest == kQkv) {
        UNMASK_CHECK(t.ndim() == 2 && t.size(0) % 3 == 0, kWho, ": ", name, " must be [3A, D], got ", t.describe());
        const int64_t a = t.size(0) / 3;
        seen.qkv = true;
        seen.rows = a;
        for (int part = 0; part < 3; ++part)
          out.emplace_back(block + std::string(kHfProj[part]), t.slice(0, part * a, (part + 1) * a).contiguous());
        continue;
      }
      if (const auto hf = lookup(kBlockRenames, rest, false)) {
        if (rest == "attn.q_bias") seen.q_bias = true, seen.q_bias_len = t.numel();
        if (rest == "attn.v_bias") seen.v_bias = true, seen.v_bias_len = t.numel();
        out.emplace_back(block + std::string(*hf), t);
        continue;
      }
      unknown.push_back(name);
      continue;
    }
    if (const auto hf = lookup(kTopRenames, s, false)) {
      out.emplace_back(std::string(*hf), t);
      continue;
    }
    if (!enc_prefixed)
      if (const auto hf = lookup(kOuterRenames, s, false)) {
        out.emplace_back(std::string(*hf), t);
        continue;
      }
    unknown.push_back(name);
  }
  if (!unknown.empty())
    throw_unknown(kWho, unknown,
                  "HF VideoMAE has no slot for these (layer scale gamma_*, cos-attention scale, cls_token and "
                  "learned pos tables are not in HF's model); strip wrapper prefixes such as module. first");
  check_biases(blocks, kWho);
  check_no_duplicates(out, kWho);
  return out;
}

NamedTensors videomae_hf_to_original(const NamedTensors& hf, OriginalLayout layout, std::vector<std::string>* dropped) {
  constexpr const char* kWho = "videomae HF -> original";
  if (layout == OriginalLayout::automatic) {
    layout = OriginalLayout::finetune;
    for (const auto& [name, t] : hf)
      if (name.rfind("decoder.", 0) == 0 || name == "encoder_to_decoder.weight" || name == "mask_token")
        layout = OriginalLayout::pretrain;
  }
  const std::string enc = layout == OriginalLayout::pretrain ? "encoder." : "";
  NamedTensors out;
  std::vector<std::string> unknown;
  std::map<std::string, BlockSeen> blocks;
  struct Pending {
    size_t slot;  // index in `out` of the fused weight
    Tensor part[3];
  };
  std::map<std::string, Pending> pending;  // by original block prefix
  for (const auto& [hf_name, t] : hf) {
    // A bare VideoMAEModel saves its tensors without the `videomae.` prefix.
    const std::string name = bare_hf_model_name(hf_name) ? "videomae." + hf_name : hf_name;
    std::string_view s = name;
    std::string orig_prefix;
    bool is_block = false;
    if (strip(s, "videomae.encoder.layer.")) {
      orig_prefix = enc + "blocks.";
      is_block = true;
    } else if (strip(s, "decoder.decoder_layers.")) {
      orig_prefix = "decoder.blocks.";
      is_block = true;
    }
    if (is_block) {
      const auto idx = split_index(s);
      if (!idx) {
        unknown.push_back(name);
        continue;
      }
      const std::string block = orig_prefix + std::to_string(idx->first) + ".";
      std::string_view rest = idx->second;
      BlockSeen& seen = blocks[block];
      seen.where = name.substr(0, name.size() - rest.size() - 1);
      // Linear-style biases of newer transformers: query.bias = q_bias, value.bias = v_bias.
      if (rest == "attention.attention.query.bias") rest = "attention.attention.q_bias";
      if (rest == "attention.attention.value.bias") rest = "attention.attention.v_bias";
      if (rest == "attention.attention.key.bias") {
        if (!all_zero(t))
          throw Error(kWho, ": ", name, " ", t.describe(), " is not zero, but VideoMAE has no key bias",
                      Hint("this is not a VideoMAE checkpoint, or it was trained with a key bias the original "
                           "model cannot express"));
        if (dropped) dropped->push_back(name + " (all zeros; VideoMAE has no key bias)");
        continue;
      }
      int part = -1;
      for (int p = 0; p < 3; ++p)
        if (rest == kHfProj[p]) part = p;
      if (part >= 0) {
        UNMASK_CHECK(t.ndim() == 2, kWho, ": ", name, " must be 2-D [A, D], got ", t.describe());
        auto it = pending.find(block);
        if (it == pending.end()) {
          it = pending.emplace(block, Pending{out.size(), {}}).first;
          out.emplace_back(block + std::string(kQkv), Tensor());  // filled once all three are seen
        }
        UNMASK_CHECK(!it->second.part[part].defined(), kWho, ": ", name, " appears twice");
        it->second.part[part] = t;
        continue;
      }
      if (const auto orig = lookup(kBlockRenames, rest, true)) {
        if (*orig == "attn.q_bias") {
          UNMASK_CHECK(!seen.q_bias, kWho, ": ", seen.where, " has both q_bias and query.bias");
          seen.q_bias = true, seen.q_bias_len = t.numel();
        }
        if (*orig == "attn.v_bias") {
          UNMASK_CHECK(!seen.v_bias, kWho, ": ", seen.where, " has both v_bias and value.bias");
          seen.v_bias = true, seen.v_bias_len = t.numel();
        }
        out.emplace_back(block + std::string(*orig), t);
        continue;
      }
      unknown.push_back(name);
      continue;
    }
    if (const auto orig = lookup(kTopRenames, s, true)) {
      out.emplace_back(enc + std::string(*orig), t);
      continue;
    }
    if (const auto orig = lookup(kOuterRenames, s, true)) {
      out.emplace_back(std::string(*orig), t);
      continue;
    }
    unknown.push_back(name);
  }
  if (!unknown.empty())
    throw_unknown(kWho, unknown,
                  "only VideoMAEForPreTraining / VideoMAEForVideoClassification / VideoMAEModel "
                  "tensors convert; strip wrapper prefixes first");
  // Fuse q/k/v: all three present, same shape and dtype.
  std::vector<std::string> problems;
  for (auto& [block, p] : pending) {
    BlockSeen& seen = blocks[block];
    const char* part_names[3] = {"query", "key", "value"};
    bool complete = true;
    for (int i = 0; i < 3; ++i)
      if (!p.part[i].defined()) {
        problems.push_back(seen.where + " has no " + part_names[i] + ".weight");
        complete = false;
      }
    if (!complete) continue;
    const Tensor& q = p.part[0];
    if (p.part[1].shape() != q.shape() || p.part[2].shape() != q.shape() || p.part[1].dtype() != q.dtype() ||
        p.part[2].dtype() != q.dtype()) {
      problems.push_back(seen.where + " query/key/value differ: " + q.describe() + ", " + p.part[1].describe() + ", " +
                         p.part[2].describe());
      continue;
    }
    seen.qkv = true;
    seen.rows = q.size(0);
    out[p.slot].second = fuse_rows(q, p.part[1], p.part[2]);
  }
  if (!problems.empty())
    throw Error(kWho, ": incomplete attention projections: ", list_names(problems),
                Hint("every layer needs query, key and value weights"));
  check_biases(blocks, kWho);
  check_no_duplicates(out, kWho);
  return out;
}

Tensor sinusoid_position_table(int64_t tokens, int64_t dim) {
  UNMASK_CHECK(tokens >= 1 && dim >= 1, "sinusoid_position_table: tokens ", tokens, " and dim ", dim, " must be >= 1");
  Tensor out = Tensor::empty({1, tokens, dim}, DType::f32);
  float* p = out.data<float>();
  for (int64_t i = 0; i < tokens; ++i)
    for (int64_t j = 0; j < dim; ++j) {
      const double angle = double(i) / std::pow(10000.0, 2.0 * double(j / 2) / double(dim));
      p[i * dim + j] = float((j % 2 == 0) ? std::sin(angle) : std::cos(angle));
    }
  return out;
}

void check_position_table(const std::string& name, const Tensor& table, int64_t frames, int64_t height, int64_t width,
                          int64_t dim) {
  const int64_t tokens = frames * height * width;
  const bool shape_ok = (table.ndim() == 3 && table.size(0) == 1) || table.ndim() == 2;
  if (shape_ok && table.size(-2) == tokens && table.size(-1) == dim) return;
  std::ostringstream grid;
  grid << frames << "x" << height << "x" << width << " = " << tokens << " tokens of width " << dim;
  std::string guess;
  if (shape_ok && table.size(-2) % (height * width) == 0)
    guess = " (the checkpoint's would be " + std::to_string(table.size(-2) / (height * width)) + "x" +
            std::to_string(height) + "x" + std::to_string(width) + " at this resolution)";
  else if (shape_ok && table.size(-2) % frames == 0)
    guess = " (" + std::to_string(frames) + " temporal slices of " + std::to_string(table.size(-2) / frames) +
            " patches in the checkpoint)";
  throw Error("positional table ", name, " ", table.describe(), " does not match the model's [1, ", tokens, ", ", dim,
              "] (", grid.str(), ")", guess,
              Hint("VideoMAE's table is the fixed 1-D sinusoid: regenerate it for the new clip length / "
                   "resolution (sinusoid_position_table) instead of loading it; resample a learned table "
                   "with train::resample_table (nn/resample_table.h)"));
}

}  // namespace unmask::video
