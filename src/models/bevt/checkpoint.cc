// models/bevt/checkpoint.cc: see checkpoint.h.
#include "models/bevt/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/file.h"
#include "io/safetensors.h"
#include "io/torch_pickle.h"
#include "unmask/error.h"

namespace unmask::bevt {

namespace fs = std::filesystem;

namespace {

std::string shape_str(const Shape& s) { return s.str(); }

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// The raw tensors of any supported container, names as stored.
NamedTensors read_container(const std::string& path, std::vector<std::string>& notes) {
  std::string file = path;
  if (fs::is_directory(path)) {
    file = (fs::path(path) / "model.safetensors").string();
    if (!fs::exists(file))
      throw Error("BEVT weights: ", path, " is a directory without model.safetensors",
                  Hint("give the model directory a run saved (run/checkpoints/step_N/model), or a .pth / .safetensors file"));
  }
  if (!fs::exists(file)) throw Error("BEVT weights: ", file, " does not exist");
  NamedTensors out;
  std::ifstream in(file, std::ios::binary);
  char head[8] = {};
  in.read(head, 8);
  if (io::looks_like_torch_file(reinterpret_cast<const uint8_t*>(head), size_t(in.gcount()))) {
    const io::TorchCheckpoint ck = io::read_torch_checkpoint(file);
    std::string from;
    std::vector<std::string> ignored;
    out = io::torch_state_dict(ck, &from, &ignored);
    if (!from.empty()) notes.push_back("read the state dict under '" + from + "'");
    if (!ignored.empty()) notes.push_back("left out " + std::to_string(ignored.size()) + " other tensors (optimizer state)");
  } else {
    const io::SafeTensorsFile st = io::SafeTensorsFile::open(file);
    for (const io::SafeTensorInfo& t : st.tensors()) out.emplace_back(t.name, st.tensor(t.name));
  }
  return out;
}

Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor o = Tensor::empty(t.shape(), DType::f32);
  UNMASK_CHECK(t.dtype() == DType::f64, "BEVT weights: a ", t.describe(), " tensor cannot become f32");
  const Tensor c = t.contiguous();
  for (int64_t i = 0; i < t.numel(); ++i) o.data<float>()[i] = float(c.data<double>()[i]);
  return o;
}

void copy_into(Tensor& dst, const Tensor& src) {
  const Tensor s = as_f32(src).contiguous();
  UNMASK_CHECK(dst.is_contiguous(), "BEVT weights: a parameter view is not contiguous");
  std::memcpy(dst.data<float>(), s.data<float>(), size_t(dst.numel()) * sizeof(float));
}

}  // namespace

NamedTensors read_bevt_tensors(const std::string& path, std::vector<std::string>* notes_out) {
  std::vector<std::string> notes;
  NamedTensors raw = read_container(path, notes), out;
  int64_t skipped_buffers = 0, tokenizer = 0, unwrapped = 0;
  for (auto& [name, t] : raw) {
    std::string n = name;
    if (starts_with(n, "module.")) n = n.substr(7), ++unwrapped;
    if (ends_with(n, "relative_position_index") || ends_with(n, "attn_mask")) {
      ++skipped_buffers;
      continue;
    }
    if (starts_with(n, "cls_head.vae_encoder.")) {
      ++tokenizer;
      continue;
    }
    out.emplace_back(n, t);
  }
  if (unwrapped) notes.push_back("stripped 'module.' from " + std::to_string(unwrapped) + " names");
  if (skipped_buffers) notes.push_back("skipped " + std::to_string(skipped_buffers) + " index / mask buffers (recomputed)");
  if (tokenizer)
    notes.push_back("skipped the " + std::to_string(tokenizer) +
                    " tokenizer tensors (cls_head.vae_encoder.*; the tokenizer is its own file: --tokenizer)");
  if (notes_out) *notes_out = notes;
  return out;
}

std::string BevtLoadReport::summary() const {
  std::string s = "loaded " + std::to_string(loaded) + " tensors from " + source;
  for (const std::string& n : notes) s += "\n  " + n;
  if (!kept_init.empty()) s += "\n  kept their init (absent from the file): " + std::to_string(kept_init.size());
  for (const std::string& n : kept_init) s += "\n    " + n;
  if (!unused.empty()) s += "\n  unused tensors of the file: " + std::to_string(unused.size());
  for (const std::string& n : unused) s += "\n    " + n;
  return s;
}

BevtLoadReport load_bevt(const std::string& path, std::vector<Param>& params, const BevtLoadOptions& options) {
  BevtLoadReport r;
  r.source = path;
  const NamedTensors tensors = read_bevt_tensors(path, &r.notes);
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : tensors) by_name[n] = &t;
  std::vector<std::string> problems;
  std::vector<std::pair<Param*, const Tensor*>> fills;
  for (Param& p : params) {
    auto it = by_name.find(p.name);
    if (it == by_name.end()) {
      const bool allowed = std::any_of(options.allow_missing_prefixes.begin(), options.allow_missing_prefixes.end(),
                                       [&](const std::string& pre) { return starts_with(p.name, pre); });
      if (allowed)
        r.kept_init.push_back(p.name);
      else
        problems.push_back("missing " + p.name + " " + shape_str(p.value.shape()));
      continue;
    }
    if (it->second->shape() != p.value.shape()) {
      problems.push_back(p.name + ": the file has " + shape_str(it->second->shape()) + ", the model " +
                         shape_str(p.value.shape()));
      continue;
    }
    if (it->second->dtype() != DType::f32 && it->second->dtype() != DType::f64) {
      problems.push_back(p.name + ": stored as " + it->second->describe() + " (f32 or f64 expected)");
      continue;
    }
    fills.emplace_back(&p, it->second);
    by_name.erase(it);
  }
  if (!problems.empty()) {
    std::string msg;
    const size_t shown = std::min<size_t>(problems.size(), 12);
    for (size_t i = 0; i < shown; ++i) msg += "\n  " + problems[i];
    if (shown < problems.size()) msg += "\n  ... and " + std::to_string(problems.size() - shown) + " more";
    throw Error("BEVT weights: ", path, " does not fit the model (", problems.size(), " problems):", msg,
                Hint("check the model size (--size, --embed-dim, --depths, --heads, --window) and --vocab against "
                     "the checkpoint's"));
  }
  for (auto& [p, t] : fills) copy_into(p->value, *t);
  r.loaded = int64_t(fills.size());
  for (const auto& [n, t] : by_name) r.unused.push_back(n);
  return r;
}

void save_bevt(const std::string& dir, const SwinConfig& c, int64_t vocab, const std::vector<Param>& params) {
  fs::create_directories(dir);
  NamedTensors out;
  for (const Param& p : params) out.emplace_back(p.name, p.value);
  io::write_safetensors((fs::path(dir) / "model.safetensors").string(), out);
  nlohmann::json j;
  j["model_type"] = "bevt";
  j["embed_dim"] = c.embed_dim;
  j["depths"] = c.depths;
  j["num_heads"] = c.heads;
  j["patch_size"] = c.patch;
  j["window_size"] = c.window;
  j["mlp_ratio"] = c.mlp_ratio;
  j["layer_norm_eps"] = c.eps;
  j["vocab_size"] = vocab;
  io::write_file_atomic((fs::path(dir) / "config.json").string(), j.dump(2) + "\n");
}

std::pair<SwinConfig, int64_t> read_bevt_config(const std::string& path) {
  const std::string file = fs::is_directory(path) ? (fs::path(path) / "config.json").string() : path;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_file(file));
    SwinConfig c;
    c.embed_dim = j.at("embed_dim").get<int64_t>();
    c.depths = j.at("depths").get<std::array<int64_t, 4>>();
    c.heads = j.at("num_heads").get<std::array<int64_t, 4>>();
    c.patch = j.at("patch_size").get<std::array<int64_t, 3>>();
    c.window = j.at("window_size").get<std::array<int64_t, 3>>();
    c.mlp_ratio = j.at("mlp_ratio").get<int64_t>();
    c.eps = j.at("layer_norm_eps").get<float>();
    return {c, j.value("vocab_size", int64_t(0))};
  } catch (const nlohmann::json::exception& e) {
    throw Error("BEVT config: ", file, " is not a BEVT config.json (", e.what(), ")",
                Hint("a model directory unmask saved holds it; for a bare .pth give the sizes on the command line"));
  }
}

DalleEncoder load_dalle_encoder(const std::string& path) {
  std::vector<std::string> notes;
  std::map<std::string, Tensor> t;
  for (auto& [name, v] : read_container(path, notes)) {
    std::string n = name;
    if (starts_with(n, "module.")) n = n.substr(7);
    if (starts_with(n, "cls_head.vae_encoder.")) n = n.substr(21);
    if (starts_with(n, "blocks.")) t[n] = v;
  }
  auto need = [&](const std::string& n) -> const Tensor& {
    auto it = t.find(n);
    if (it == t.end())
      throw Error("DALL-E tokenizer: ", path, " has no ", n,
                  Hint("the file must hold the encoder's state dict (blocks.input.w, blocks.group_1.block_1..., "
                       "blocks.output.conv.w); OpenAI's encoder.pkl pickles the whole module: convert it once to "
                       "safetensors where PyTorch and the dall_e package are installed (README, BEVT)"));
    return it->second;
  };
  DalleEncoderConfig c;
  const Tensor& in = need("blocks.input.w");
  UNMASK_CHECK(in.ndim() == 4, "DALL-E tokenizer: blocks.input.w is ", in.describe(), ", not [hidden, 3, 7, 7]");
  c.hidden = in.size(0), c.channels = in.size(1);
  c.groups = 0;
  while (t.count("blocks.group_" + std::to_string(c.groups + 1) + ".block_1.res_path.conv_1.w")) ++c.groups;
  c.blocks_per_group = 0;
  while (t.count("blocks.group_1.block_" + std::to_string(c.blocks_per_group + 1) + ".res_path.conv_1.w"))
    ++c.blocks_per_group;
  UNMASK_CHECK(c.groups > 0 && c.blocks_per_group > 0, "DALL-E tokenizer: ", path, " has no encoder groups");
  c.vocab = need("blocks.output.conv.w").size(0);
  DalleEncoder e = DalleEncoder::random(c, 0);
  std::vector<std::string> problems;
  for (auto& [name, dst] : e.named()) {
    const Tensor& src = need(name);
    if (src.shape() != dst->shape())
      problems.push_back(name + ": " + shape_str(src.shape()) + " in the file, " + shape_str(dst->shape()) + " expected");
    else
      copy_into(*dst, src);
  }
  if (!problems.empty()) throw Error("DALL-E tokenizer: ", path, " has inconsistent shapes: ", problems.front());
  return e;
}

void save_dalle_encoder(const std::string& path, DalleEncoder& encoder) {
  NamedTensors out;
  for (auto& [name, t] : encoder.named()) out.emplace_back(name, *t);
  io::write_safetensors(path, out);
}

}  // namespace unmask::bevt
