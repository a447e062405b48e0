// models/bevt/checkpoint.cc: see checkpoint.h.
#include "models/bevt/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/file.h"
#include "nn/resample_table.h"
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

// torchvision's swin3d_* names -> BEVT's: patch_embed.* and norm.* under backbone., the stages
// features.{0,2,4,6}.j -> layers.{0..3}.blocks.j (mlp.0 / mlp.3 -> mlp.fc1 / mlp.fc2), the
// mergings features.{1,3,5} -> layers.{0..2}.downsample, head -> cls_head.fc_cls.
std::string torchvision_to_bevt(const std::string& n) {
  if (starts_with(n, "head.")) return "cls_head.fc_cls." + n.substr(5);
  if (!starts_with(n, "features.")) return "backbone." + n;  // patch_embed.*, norm.*
  const size_t dot = n.find('.', 9);
  const int index = std::stoi(n.substr(9, dot - 9));
  std::string rest = n.substr(dot + 1);
  if (index % 2 == 1) return "backbone.layers." + std::to_string(index / 2) + ".downsample." + rest;
  const size_t dot2 = rest.find('.');
  const std::string block = rest.substr(0, dot2);
  rest = rest.substr(dot2 + 1);
  if (starts_with(rest, "mlp.0.")) rest = "mlp.fc1." + rest.substr(6);
  if (starts_with(rest, "mlp.3.")) rest = "mlp.fc2." + rest.substr(6);
  return "backbone.layers." + std::to_string(index / 2) + ".blocks." + block + "." + rest;
}

// The names of the users' layouts as BEVT's: torchvision's swin3d_* (features.*); a 2-D Swin
// image-stream checkpoint (BEVT's inflate_weights input: a 4-D patch_embed.proj.weight, names
// under backbone. / encoder. or none, fc_norm for norm). Official Video Swin and BEVT's own
// mmaction names pass through.
NamedTensors to_bevt_names(NamedTensors in, std::vector<std::string>& notes) {
  const bool torchvision = std::any_of(in.begin(), in.end(), [](const auto& t) { return starts_with(t.first, "features."); });
  if (torchvision) {
    for (auto& [n, t] : in) n = torchvision_to_bevt(n);
    notes.push_back("renamed torchvision's swin3d names (features.*, mlp.0/3, head) to BEVT's");
    return in;
  }
  auto strip = [](std::string n) {
    for (const char* p : {"backbone.", "encoder."})
      if (starts_with(n, p)) return n.substr(std::string(p).size());
    return n;
  };
  const bool image_stream = std::any_of(in.begin(), in.end(), [&](const auto& t) {
    return strip(t.first) == "patch_embed.proj.weight" && t.second.ndim() == 4;
  });
  if (!image_stream) return in;
  NamedTensors out;
  for (auto& [name, t] : in) {
    std::string n = strip(name);
    if (starts_with(n, "fc_norm.")) n = "norm." + n.substr(8);
    if (starts_with(n, "patch_embed.")) out.emplace_back("backbone.patch_embed_2d." + n.substr(12), t);  // kept as is
    if (starts_with(n, "cls_head.") || starts_with(n, "head.")) continue;  // the image classifier's head
    out.emplace_back("backbone." + n, t);  // patch_embed.* inflated in load_bevt against the model's shapes
  }
  notes.push_back("a 2-D Swin (image-stream) checkpoint: patch_embed copied to patch_embed_2d; the 3-D patch "
                  "embedding and the relative-position tables inflated as BEVT's inflate_weights does");
  return out;
}

// BEVT's inflate_weights for one tensor, when the file holds the 2-D form of a 3-D parameter:
// the Conv2d patch weight [C, 3, p, p] -> [C, 3, t, p, p] repeated over t and divided by t; a
// table [S*S, NH] (rows in (dh, dw) order) -> [(2t-1) L, NH], L = (2h-1)(2w-1) for the model's
// window: resized bicubically to (2h-1) x (2w-1) when S*S != L (F.interpolate mode='bicubic',
// align_corners=False over each head's S x S image), then tiled 2t-1 times (every temporal
// offset the 2-D table). Returns an undefined tensor when the shapes are not such a pair.
Tensor inflate(const std::string& name, const Tensor& file, const Shape& want, const std::array<int64_t, 3>& window) {
  const Tensor f = as_f32(file).contiguous();
  if (name == "backbone.patch_embed.proj.weight" && f.ndim() == 4 && want.ndim() == 5 && f.size(0) == want[0] && f.size(1) == want[1] && f.size(2) == want[3] &&
      f.size(3) == want[4]) {
    const int64_t t = want[2], C = want[0] * want[1], P = want[3] * want[4];
    Tensor o = Tensor::empty(want, DType::f32);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < t; ++k)
        for (int64_t p = 0; p < P; ++p) o.data<float>()[(c * t + k) * P + p] = f.data<float>()[c * P + p] / float(t);
    return o;
  }
  if (!ends_with(name, "relative_position_bias_table") || f.ndim() != 2 || want.ndim() != 2 || f.size(1) != want[1])
    return Tensor();
  Tensor plane = f;  // [L, NH], the 2-D table at the model's window
  if (window[0] > 0) {
    const int64_t rows = 2 * window[1] - 1, cols = 2 * window[2] - 1, side = int64_t(std::lround(std::sqrt(double(f.size(0)))));
    if (want[0] != (2 * window[0] - 1) * rows * cols) return Tensor();
    if (f.size(0) != rows * cols) {
      if (side * side != f.size(0)) return Tensor();  // not a square window's table
      const Tensor resized =
          train::resample_table(f.view({1, f.size(0), f.size(1)}), 1, side, side, 1, rows, cols);
      plane = resized.view({rows * cols, f.size(1)});
    }
  }
  if (want[0] <= plane.size(0) || want[0] % plane.size(0) != 0) return Tensor();
  Tensor o = Tensor::empty(want, DType::f32);
  for (int64_t k = 0; k < want[0] / plane.size(0); ++k)
    std::memcpy(o.data<float>() + k * plane.numel(), plane.data<float>(), size_t(plane.numel()) * sizeof(float));
  return o;
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
  out = to_bevt_names(std::move(out), notes);
  if (skipped_buffers) notes.push_back("skipped " + std::to_string(skipped_buffers) + " index / mask buffers (recomputed)");
  if (tokenizer)
    notes.push_back("skipped the " + std::to_string(tokenizer) +
                    " tokenizer tensors (cls_head.vae_encoder.*; the tokenizer is its own file: --tokenizer)");
  if (notes_out) *notes_out = notes;
  return out;
}

std::string BevtLoadReport::summary() const {
  std::string s = "loaded " + std::to_string(loaded) + " tensors from " + source;
  if (inflated) s += " (" + std::to_string(inflated) + " inflated from 2-D)";
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
  std::deque<Tensor> inflated_;  // inflated copies (stable addresses)
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
      Tensor inflated = inflate(p.name, *it->second, p.value.shape(), options.window);
      if (!inflated.defined()) {
        problems.push_back(p.name + ": the file has " + shape_str(it->second->shape()) + ", the model " +
                           shape_str(p.value.shape()));
        continue;
      }
      inflated_.push_back(inflated);
      fills.emplace_back(&p, &inflated_.back());
      ++r.inflated;
      by_name.erase(it);
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

namespace {

// dir/model.safetensors and dir/config.json: the Swin sizes plus `head` (the model's own fields).
void save_swin_dir(const std::string& dir, const SwinConfig& c, const std::vector<Param>& params,
                   const nlohmann::json& head) {
  fs::create_directories(dir);
  NamedTensors out;
  for (const Param& p : params)  // values on a GPU are written from a host copy
    out.emplace_back(p.name, p.value.device() == Device::cpu ? p.value : p.value.to(Device::cpu));
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
  j.update(head);
  io::write_file_atomic((fs::path(dir) / "config.json").string(), j.dump(2) + "\n");
}

}  // namespace

void save_bevt(const std::string& dir, const SwinConfig& c, int64_t vocab, const std::vector<Param>& params) {
  save_swin_dir(dir, c, params, {{"vocab_size", vocab}});
}

void save_swin_classifier(const std::string& dir, const SwinConfig& c, int64_t num_classes,
                          const std::vector<Param>& params, const std::vector<std::string>& class_names) {
  nlohmann::json id2label = nlohmann::json::object();
  for (int64_t k = 0; k < num_classes; ++k)
    id2label[std::to_string(k)] = size_t(k) < class_names.size() ? class_names[size_t(k)] : "LABEL_" + std::to_string(k);
  save_swin_dir(dir, c, params, {{"num_classes", num_classes}, {"id2label", id2label}});
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
    // a pickled module (encoder.pkl): its attribute dicts' names drop out of the path
    for (const char* part : {"_modules.", "_parameters.", "_buffers."})
      for (size_t at; (at = n.find(part)) != std::string::npos;) n.erase(at, std::string(part).size());
    if (starts_with(n, "module.")) n = n.substr(7);
    if (starts_with(n, "cls_head.vae_encoder.")) n = n.substr(21);
    if (starts_with(n, "blocks.")) t[n] = v;
  }
  auto need = [&](const std::string& n) -> const Tensor& {
    auto it = t.find(n);
    if (it == t.end())
      throw Error("DALL-E tokenizer: ", path, " has no ", n,
                  Hint("the file must hold the DALL-E encoder: OpenAI's encoder.pkl, or its state dict (blocks.input.w, "
                       "blocks.group_1.block_1..., blocks.output.conv.w) as safetensors or torch.save"));
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
