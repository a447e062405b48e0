// models/videomae/checkpoint.cc: VideoMAE checkpoint save / load (see videomae_checkpoint.h).
#include "models/videomae/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/half.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "io/torch_pickle.h"
#include "nn/resample_table.h"
#include "unmask/error.h"

namespace unmask::video {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "unmask-videomae";
constexpr int kVersion = 1;
constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kConfigFile = "config.json";

bool starts_with(const std::string& s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}
bool ends_with(const std::string& s, std::string_view p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

std::string join_list(const std::vector<std::string>& v, size_t max = 16) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size() && i < max; ++i) os << (i ? "; " : "") << v[i];
  if (v.size() > max) os << "; ... (" << v.size() - max << " more)";
  return os.str();
}

// Shortest decimal of a float, as a double (1e-6f -> 1e-06, not 9.99999997e-07).
double float_decimal(float f) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

bool is_pos_table(const std::string& n) {
  return n == "pos_embed" || n == "encoder.pos_embed" || n == "decoder.pos_embed";
}

// Any float tensor -> f32 (a copy unless it already is f32).
Tensor as_f32(const Tensor& t, const std::string& name) {
  if (t.dtype() == DType::f32) return t;
  const Tensor c = t.contiguous();
  Tensor out = Tensor::empty(c.shape(), DType::f32);
  float* o = out.data<float>();
  const int64_t n = c.numel();
  switch (c.dtype()) {
    case DType::f16:
    case DType::bf16: {
      const auto* h = static_cast<const uint16_t*>(c.raw());
      for (int64_t i = 0; i < n; ++i) o[i] = c.dtype() == DType::f16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
      break;
    }
    case DType::f64: {
      const double* d = c.data<double>();
      for (int64_t i = 0; i < n; ++i) o[i] = float(d[i]);
      break;
    }
    default:
      throw Error("videomae checkpoint: tensor ", name, " ", t.describe(), " is not a floating-point tensor",
                  Hint("model parameters load from f32 / f16 / bf16 / f64 tensors only"));
  }
  return out;
}

// Max |t - fixed sinusoid table of t's own size|; t is f32 [1, n, d] or [n, d].
double sinusoid_distance(const Tensor& t) {
  const int64_t n = t.size(-2), d = t.size(-1);
  const Tensor ref = sinusoid_position_table(n, d);
  const Tensor c = t.contiguous();
  const float* a = c.data<float>();
  const float* b = ref.data<float>();
  double worst = 0;
  for (int64_t i = 0; i < n * d; ++i) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  return std::isnan(worst) ? 1e30 : worst;
}

// The sinusoid check's tolerance is the table's storage precision: a V-SWIFT checkpoint saved in
// fp16 / bf16 rounds it (by up to 2^-12 / 2^-9 near 1). Values that all survive a round trip
// through bf16 (f16) were stored that way.
double sinusoid_tolerance(const Tensor& t) {
  const Tensor c = t.contiguous();
  const float* p = c.data<float>();
  bool f16 = true, bf16 = true;
  for (int64_t i = 0; i < c.numel() && (f16 || bf16); ++i) {
    f16 = f16 && f16_to_f32(f32_to_f16(p[i])) == p[i];
    bf16 = bf16 && bf16_to_f32(f32_to_bf16(p[i])) == p[i];
  }
  return bf16 ? 8e-3 : f16 ? 1e-3 : 1e-4;
}

std::string grid_str(int64_t t, int64_t h, int64_t w) {
  return std::to_string(t) + "x" + std::to_string(h) + "x" + std::to_string(w) + " = " + std::to_string(t * h * w) +
         " tokens";
}

void fsync_dir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

nlohmann::json config_json(const VideoMAEConfig& c, VideoMAENaming naming, bool pretrain, int64_t num_classes,
                           const std::vector<std::string>& class_names) {
  nlohmann::json j;
  // Only a directory in Hugging Face names says it is a transformers model: one in the original
  // names under model_type "videomae" would load in transformers with every weight missing and
  // freshly initialised (a silent wrong model), so it says what it is and how to convert it.
  if (naming == VideoMAENaming::hf) {
    j["architectures"] = {num_classes > 0 ? "VideoMAEForVideoClassification"
                          : pretrain      ? "VideoMAEForPreTraining"
                                          : "VideoMAEModel"};
    j["model_type"] = "videomae";
  } else {
    j["note"] = "original VideoMAE (MCG-NJU) parameter names, not a Hugging Face transformers directory; "
                "`unmask convert-videomae --in DIR --out HF_DIR --to hf` writes one transformers loads";
  }
  j["image_size"] = c.img_size;
  j["patch_size"] = c.patch;
  j["num_channels"] = c.channels;
  j["num_frames"] = c.num_frames;
  j["tubelet_size"] = c.tubelet;
  j["hidden_size"] = c.dim;
  j["num_hidden_layers"] = c.depth;
  j["num_attention_heads"] = c.heads;
  j["intermediate_size"] = c.mlp_hidden(c.dim);
  j["hidden_act"] = "gelu";
  j["hidden_dropout_prob"] = 0.0;
  j["attention_probs_dropout_prob"] = 0.0;
  j["initializer_range"] = 0.02;
  j["layer_norm_eps"] = float_decimal(c.norm_eps);  // the true 1e-6 (HF's default 1e-12 diverges)
  j["qkv_bias"] = true;
  j["use_mean_pooling"] = !pretrain;
  j["decoder_num_attention_heads"] = c.decoder_heads;
  j["decoder_hidden_size"] = c.decoder_dim;
  j["decoder_num_hidden_layers"] = c.decoder_depth;
  j["decoder_intermediate_size"] = c.mlp_hidden(c.decoder_dim);
  j["norm_pix_loss"] = true;
  j["torch_dtype"] = "float32";
  if (num_classes > 0) {
    nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
    for (int64_t k = 0; k < num_classes; ++k) {
      const std::string name = class_names.empty() ? "LABEL_" + std::to_string(k) : class_names[size_t(k)];
      id2label[std::to_string(k)] = name;
      label2id[name] = k;
    }
    j["num_labels"] = num_classes;
    j["id2label"] = id2label;
    j["label2id"] = label2id;
  }
  j["unmask"] = {{"format", kFormat},
                 {"version", kVersion},
                 {"naming", naming == VideoMAENaming::hf ? "hf" : "original"},
                 {"layout", pretrain ? "pretrain" : "finetune"},
                 {"img_size", c.img_size},
                 {"num_frames", c.num_frames},
                 {"tubelet", c.tubelet},
                 {"patch", c.patch},
                 {"channels", c.channels},
                 {"dim", c.dim},
                 {"depth", c.depth},
                 {"heads", c.heads},
                 {"decoder_dim", c.decoder_dim},
                 {"decoder_depth", c.decoder_depth},
                 {"decoder_heads", c.decoder_heads},
                 {"mlp_ratio", c.mlp_ratio},
                 {"norm_eps", float_decimal(c.norm_eps)},
                 {"num_classes", num_classes}};
  return j;
}

// Replaces `dir` by the completed temporary directory `tmp` (same parent).
void publish_dir(const fs::path& tmp, const fs::path& dir) {
  std::error_code ec;
  fs::path old;
  if (fs::exists(dir, ec)) {
    old = dir.parent_path() / (".old-" + dir.filename().string() + "-" + std::to_string(::getpid()));
    fs::remove_all(old, ec);
    fs::rename(dir, old);
  }
  fs::rename(tmp, dir);
  fsync_dir(dir.parent_path().string());
  if (!old.empty()) fs::remove_all(old, ec);
}

// An existing output directory may only hold what save_videomae writes.
void check_replaceable(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  if (!fs::is_directory(dir, ec))
    throw Error("save_videomae: ", dir.string(), " exists and is not a directory",
                Hint("choose a new output directory"));
  std::vector<std::string> foreign;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n != kWeightsFile && n != kConfigFile) foreign.push_back(n);
  }
  if (!foreign.empty())
    throw Error("save_videomae: ", dir.string(), " exists and holds other files (", join_list(foreign, 8),
                "); it is not replaced", Hint("choose a new output directory, or remove it first"));
}

}  // namespace

// ---- expected shapes ----------------------------------------------------------------------

std::vector<std::pair<std::string, Shape>> videomae_expected_shapes(const VideoMAEConfig& c, bool pretrain,
                                                                    int64_t num_classes) {
  std::vector<std::pair<std::string, Shape>> out;
  auto blocks = [&](const std::string& prefix, int64_t depth, int64_t d) {
    const int64_t h = c.mlp_hidden(d);
    for (int64_t i = 0; i < depth; ++i) {
      const std::string b = prefix + std::to_string(i) + ".";
      out.push_back({b + "norm1.weight", {d}});
      out.push_back({b + "norm1.bias", {d}});
      out.push_back({b + "attn.q_bias", {d}});
      out.push_back({b + "attn.v_bias", {d}});
      out.push_back({b + "attn.qkv.weight", {3 * d, d}});
      out.push_back({b + "attn.proj.weight", {d, d}});
      out.push_back({b + "attn.proj.bias", {d}});
      out.push_back({b + "norm2.weight", {d}});
      out.push_back({b + "norm2.bias", {d}});
      out.push_back({b + "mlp.fc1.weight", {h, d}});
      out.push_back({b + "mlp.fc1.bias", {h}});
      out.push_back({b + "mlp.fc2.weight", {d, h}});
      out.push_back({b + "mlp.fc2.bias", {d}});
    }
  };
  const std::string enc = pretrain ? "encoder." : "";
  out.push_back({enc + "patch_embed.proj.weight", {c.dim, c.channels, c.tubelet, c.patch, c.patch}});
  out.push_back({enc + "patch_embed.proj.bias", {c.dim}});
  blocks(enc + "blocks.", c.depth, c.dim);
  if (pretrain) {
    out.push_back({"encoder.norm.weight", {c.dim}});
    out.push_back({"encoder.norm.bias", {c.dim}});
    blocks("decoder.blocks.", c.decoder_depth, c.decoder_dim);
    out.push_back({"decoder.norm.weight", {c.decoder_dim}});
    out.push_back({"decoder.norm.bias", {c.decoder_dim}});
    out.push_back({"decoder.head.weight", {c.patch_dim(), c.decoder_dim}});
    out.push_back({"decoder.head.bias", {c.patch_dim()}});
    out.push_back({"encoder_to_decoder.weight", {c.decoder_dim, c.dim}});
    out.push_back({"mask_token", {1, 1, c.decoder_dim}});
  } else {
    out.push_back({"fc_norm.weight", {c.dim}});
    out.push_back({"fc_norm.bias", {c.dim}});
    out.push_back({"head.weight", {num_classes, c.dim}});
    out.push_back({"head.bias", {num_classes}});
  }
  return out;
}

// ---- save ---------------------------------------------------------------------------------------

void save_videomae_tensors(const std::string& dir, const VideoMAEConfig& config, const NamedTensors& given,
                           VideoMAENaming naming, int64_t num_classes, std::vector<std::string>* notes,
                           const std::vector<std::string>& class_names) {
  config.validate();
  // Everything below reads the values (the HF conversion splits qkv, the sinusoid check compares
  // tables): tensors on a GPU are copied to the host first. Host tensors are shared, not copied.
  NamedTensors tensors = given;
  for (auto& [name, t] : tensors)
    if (t.defined() && t.device() != Device::cpu) t = t.to(Device::cpu);
  bool pretrain = false;
  int64_t head_rows = -1;
  for (const auto& [name, t] : tensors) {
    if (starts_with(name, "encoder.")) pretrain = true;
    if (name == "head.weight" && t.ndim() == 2) head_rows = t.size(0);
  }
  if (num_classes == 0 && head_rows > 0) num_classes = head_rows;
  if (!class_names.empty() && int64_t(class_names.size()) != num_classes)
    throw Error("save_videomae: ", class_names.size(), " class names for ", num_classes, " classes",
                Hint("give one name per class, in label order"));
  if (num_classes > 0 && head_rows != num_classes)
    throw Error("save_videomae: num_classes ", num_classes, " but head.weight has ",
                head_rows < 0 ? std::string("no rows (absent)") : std::to_string(head_rows) + " rows",
                Hint("pass num_classes = 0 to take it from head.weight"));
  // The tensors must be a model of `config` (so config.json does not lie).
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : tensors) by_name[name] = &t;
  std::vector<std::string> problems, absent;
  const auto expected = videomae_expected_shapes(config, pretrain, std::max<int64_t>(num_classes, 0));
  std::set<std::string> expected_names;
  for (const auto& e : expected) expected_names.insert(e.first);
  for (const auto& [name, t] : tensors)
    if (!expected_names.count(name) && !is_pos_table(name))
      problems.push_back(name + " " + t.shape().str() + " is not part of this config's model");
  for (const auto& [name, shape] : expected) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      const bool core = name.find("blocks.") != std::string::npos || name.find("patch_embed.") != std::string::npos;
      if (core && !starts_with(name, "decoder."))
        problems.push_back(name + " is missing");
      else
        absent.push_back(name);
      continue;
    }
    if (it->second->shape() != shape)
      problems.push_back(name + " is " + it->second->shape().str() + ", the config expects " + shape.str());
  }
  if (!problems.empty())
    throw Error("save_videomae: the tensors do not match the config (dim ", config.dim, ", depth ", config.depth,
                ", decoder ", config.decoder_dim, "/", config.decoder_depth, "): ", join_list(problems),
                Hint("pass the config the checkpoint was trained with (--config)"));
  if (notes && !absent.empty()) notes->push_back("not in the checkpoint (not written): " + join_list(absent, 8));

  NamedTensors out;
  std::vector<std::string> dropped;
  if (naming == VideoMAENaming::hf) {
    // HF has no slot for positional tables: fixed sinusoid ones (at their storage precision) are
    // dropped here, learned ones are an error.
    NamedTensors without_tables;
    for (const auto& [name, t] : tensors) {
      if (!is_pos_table(name)) {
        without_tables.emplace_back(name, t);
        continue;
      }
      const Tensor f = as_f32(t, name);
      const double dist = (f.ndim() == 2 || f.ndim() == 3) ? sinusoid_distance(f) : 1e30;
      if (dist > sinusoid_tolerance(f))
        throw Error("save_videomae: ", name, " ", t.describe(), " is not the fixed sinusoid table (a learned table, ",
                    "off by up to ", dist, "); HF VideoMAE has no learned positional embedding to hold it",
                    Hint("keep the original naming for checkpoints with learned positional tables"));
      dropped.push_back(name + " (fixed sinusoid table; HF recomputes it)");
    }
    out = videomae_original_to_hf(without_tables, &dropped);
  } else {
    out = tensors;
  }
  if (notes)
    for (const auto& d : dropped) notes->push_back("dropped " + d);

  fs::path target = fs::path(dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error("save_videomae: cannot create ", parent.string(), ": ", ec.message());
  check_replaceable(target);
  const fs::path tmp = parent / (".tmp-" + target.filename().string() + "-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  try {
    fs::create_directory(tmp);
    io::write_safetensors((tmp / kWeightsFile).string(), out,
                          {{"format", "pt"}, {"unmask_naming", naming == VideoMAENaming::hf ? "hf" : "original"}});
    io::write_file_atomic((tmp / kConfigFile).string(),
                          config_json(config, naming, pretrain, num_classes, class_names).dump(2) + "\n");
    fsync_dir(tmp.string());
    publish_dir(tmp, target);
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    throw Error("save_videomae: ", target.string(), " was not written: ", e.what(),
                Hint("an existing directory of that name is unchanged; check free space and permissions"));
  }
}

void save_videomae(const std::string& dir, const VideoMAEConfig& config, const std::vector<Param>& params,
                   VideoMAENaming naming, int64_t num_classes, const std::vector<std::string>& class_names) {
  NamedTensors tensors;
  tensors.reserve(params.size());
  for (const auto& p : params) tensors.emplace_back(p.name, p.value);
  save_videomae_tensors(dir, config, tensors, naming, num_classes, nullptr, class_names);
}

// ---- config.json ------------------------------------------------------------------------------

VideoMAECheckpointConfig read_videomae_checkpoint_config(const std::string& path) {
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec) ? (fs::path(path) / kConfigFile).string() : path;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_file(file));
  } catch (const nlohmann::json::exception& e) {
    throw Error("videomae config ", file, " is not valid JSON: ", e.what(), Hint("fix or regenerate config.json"));
  }
  if (!j.is_object()) throw Error("videomae config ", file, " is not a JSON object");
  VideoMAECheckpointConfig out;
  VideoMAEConfig& c = out.config;
  try {
    if (auto u = j.find("unmask"); u != j.end() && u->is_object() && u->value("format", "") == kFormat) {
      c.img_size = u->at("img_size").get<int64_t>();
      c.num_frames = u->at("num_frames").get<int64_t>();
      c.tubelet = u->at("tubelet").get<int64_t>();
      c.patch = u->at("patch").get<int64_t>();
      c.channels = u->at("channels").get<int64_t>();
      c.dim = u->at("dim").get<int64_t>();
      c.depth = u->at("depth").get<int64_t>();
      c.heads = u->at("heads").get<int64_t>();
      c.decoder_dim = u->at("decoder_dim").get<int64_t>();
      c.decoder_depth = u->at("decoder_depth").get<int64_t>();
      c.decoder_heads = u->at("decoder_heads").get<int64_t>();
      c.mlp_ratio = u->at("mlp_ratio").get<double>();
      c.norm_eps = float(u->at("norm_eps").get<double>());
      out.num_classes = u->value("num_classes", int64_t(0));
      out.from_unmask_block = true;
    } else {
      if (j.contains("model_type") && j["model_type"] != "videomae")
        throw Error("model_type is ", j["model_type"].dump(), ", not \"videomae\"");
      // HF VideoMAEConfig defaults for absent fields.
      c.img_size = j.value("image_size", int64_t(224));
      c.patch = j.value("patch_size", int64_t(16));
      c.channels = j.value("num_channels", int64_t(3));
      c.num_frames = j.value("num_frames", int64_t(16));
      c.tubelet = j.value("tubelet_size", int64_t(2));
      c.dim = j.value("hidden_size", int64_t(768));
      c.depth = j.value("num_hidden_layers", int64_t(12));
      c.heads = j.value("num_attention_heads", int64_t(12));
      const int64_t inter = j.value("intermediate_size", int64_t(3072));
      c.decoder_dim = j.value("decoder_hidden_size", int64_t(384));
      c.decoder_depth = j.value("decoder_num_hidden_layers", int64_t(4));
      c.decoder_heads = j.value("decoder_num_attention_heads", int64_t(6));
      if (c.dim <= 0 || inter <= 0)
        throw Error("hidden_size ", c.dim, " and intermediate_size ", inter, " must be positive");
      c.mlp_ratio = double(inter) / double(c.dim);
      while (c.mlp_hidden(c.dim) < inter) c.mlp_ratio = std::nextafter(c.mlp_ratio, 1e300);  // int() truncation
      const double eps = j.value("layer_norm_eps", 1e-12);
      if (std::fabs(eps - 1e-6) > 1e-12)
        out.notes.push_back("config.json layer_norm_eps " + nlohmann::json(eps).dump() +
                            " is HF's default, not VideoMAE's: using 1e-6, the eps the weights were trained with");
      c.norm_eps = 1e-6f;
      if (c.dim == 384 && c.heads == 16) {
        c.heads = 6;
        out.notes.push_back(
            "config.json says 16 heads for hidden size 384 (HF's converter for ViT-S); the "
            "original ViT-S has 6 heads of 64, which the weights were trained with: using 6");
      }
      bool classifier = true;
      if (auto a = j.find("architectures"); a != j.end() && a->is_array()) {
        classifier = false;
        for (const auto& s : *a)
          if (s.is_string() && s.get<std::string>().find("Classification") != std::string::npos) classifier = true;
      }
      if (classifier) {
        if (auto l = j.find("id2label"); l != j.end() && l->is_object() && !l->empty())
          out.num_classes = int64_t(l->size());
        else
          out.num_classes = j.value("num_labels", int64_t(0));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error("videomae config ", file, ": ", e.what(),
                Hint("a field has the wrong type; fix or regenerate config.json"));
  } catch (const Error& e) {
    throw Error("videomae config ", file, ": ", e.what());
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error("videomae config ", file, ": ", e.what());
  }
  return out;
}

VideoMAEConfig read_videomae_config(const std::string& path) {
  return read_videomae_checkpoint_config(path).config;
}

// ---- read any checkpoint ------------------------------------------------------------------------

VideoMAECheckpoint read_videomae_checkpoint(const std::string& path) {
  VideoMAECheckpoint ck;
  std::error_code ec;
  NamedTensors raw;
  std::string weights, config_dir;
  if (fs::is_directory(path, ec)) {
    config_dir = path;
    const fs::path d(path);
    if (fs::exists(d / kWeightsFile, ec) || fs::exists(d / "model.safetensors.index.json", ec)) {
      ck.format = "safetensors";
      for (const auto& f : io::open_model_weights(path))
        for (const auto& info : f.tensors()) raw.emplace_back(info.name, f.tensor(info.name));
      ck.source = (d / (fs::exists(d / kWeightsFile, ec) ? kWeightsFile : "model.safetensors.index.json")).string();
    } else if (fs::exists(d / "pytorch_model.bin", ec)) {
      weights = (d / "pytorch_model.bin").string();
    } else {
      throw Error("videomae checkpoint: ", path,
                  " has no model.safetensors, model.safetensors.index.json or "
                  "pytorch_model.bin",
                  Hint("pass the checkpoint file itself (.pth / .bin / .safetensors) or a model directory"));
    }
  } else if (fs::exists(path, ec)) {
    weights = path;
    const std::string base = fs::path(path).filename().string();
    if (base == kWeightsFile || base == "pytorch_model.bin") config_dir = fs::path(path).parent_path().string();
  } else {
    throw Error("videomae checkpoint: ", path, " does not exist", Hint("check the path"));
  }
  if (!weights.empty()) {
    uint8_t head[262] = {};
    size_t got = 0;
    {
      const int fd = ::open(weights.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) throw Error("videomae checkpoint: cannot open ", weights, ": ", std::strerror(errno));
      const ssize_t n = ::read(fd, head, sizeof head);
      ::close(fd);
      got = n > 0 ? size_t(n) : 0;
    }
    if (io::looks_like_torch_file(head, got)) {
      ck.format = "pytorch";
      const io::TorchCheckpoint t = io::read_torch_checkpoint(weights);
      std::string from;
      std::vector<std::string> ignored;
      raw = io::torch_state_dict(t, &from, &ignored);
      ck.source = weights + (from.empty() ? "" : " (key '" + from + "')");
      if (!from.empty()) ck.notes.push_back("unwrapped {'" + from + "': state_dict}");
      std::map<std::string, int> narrow;  // floating storages read as f32
      for (const auto& x : t.tensors)
        if (x.stored == DType::f16 || x.stored == DType::bf16 || x.stored == DType::f64)
          ++narrow[std::string(dtype_name(x.stored))];
      for (const auto& [dt, n] : narrow)
        ck.notes.push_back("converted " + std::to_string(n) + " " + dt + " tensor(s) to f32");
      if (!ignored.empty())
        ck.notes.push_back("ignored " + std::to_string(ignored.size()) +
                           " tensor(s) outside the state dict: " + join_list(ignored, 4));
      if (raw.empty()) {
        std::vector<std::string> keys;
        for (const auto& x : t.tensors) keys.push_back(x.path.empty() ? "<root>" : x.path[0]);
        for (const auto& o : t.other) keys.push_back(o);
        throw Error("videomae checkpoint: ", weights, " holds no state dict of tensors (found: ", join_list(keys, 8),
                    ")", Hint("expected a state dict, {'model': state_dict} or {'module': state_dict}"));
      }
    } else {
      ck.format = "safetensors";
      const io::SafeTensorsFile f = io::SafeTensorsFile::open(weights);
      for (const auto& info : f.tensors()) raw.emplace_back(info.name, f.tensor(info.name));
      ck.source = weights;
    }
  }
  if (!config_dir.empty() && fs::exists(fs::path(config_dir) / kConfigFile, ec))
    ck.config = read_videomae_checkpoint_config(config_dir);
  if (raw.empty())
    throw Error("videomae checkpoint: ", ck.source, " holds no tensors", Hint("the file is empty of weights"));

  // Wrapper prefixes: DDP's `module.` on every name, VideoMAE's `backbone.` on some.
  bool all_module = true;
  for (const auto& [n, t] : raw) all_module = all_module && starts_with(n, "module.");
  size_t backbone = 0;
  for (auto& [n, t] : raw) {
    if (all_module) n = n.substr(7);
    if (starts_with(n, "backbone.")) n = n.substr(9), ++backbone;
  }
  if (all_module) ck.notes.push_back("stripped the `module.` prefix of every name");
  if (backbone) ck.notes.push_back("stripped `backbone.` from " + std::to_string(backbone) + " name(s)");

  ck.stored_tensors = int64_t(raw.size());
  ck.naming = detect_videomae_naming(raw);
  if (ck.naming == VideoMAENaming::hf) {
    std::vector<std::string> dropped;
    ck.tensors = videomae_hf_to_original(raw, OriginalLayout::automatic, &dropped);
    ck.notes.push_back("converted HF names to the original ones (query/key/value fused into qkv)");
    for (const auto& d : dropped) ck.notes.push_back("dropped " + d);
  } else {
    ck.tensors = std::move(raw);
  }
  return ck;
}

// ---- load ---------------------------------------------------------------------------------------

std::string LoadReport::summary() const {
  std::ostringstream os;
  os << "loaded " << loaded << " parameter(s) from " << source << " (" << format << ", "
     << (naming == VideoMAENaming::hf ? "HF" : "original") << " names, "
     << (pretrain_checkpoint ? "pretraining" : "fine-tune") << " layout)\n";
  auto list = [&](const char* title, const std::vector<std::string>& v) {
    if (v.empty()) return;
    os << "  " << title << " (" << v.size() << "):\n";
    for (size_t i = 0; i < v.size() && i < 40; ++i) os << "    " << v[i] << "\n";
    if (v.size() > 40) os << "    ... (" << v.size() - 40 << " more)\n";
  };
  list("kept their initial values", kept_init);
  list("dropped", dropped);
  list("unused checkpoint tensors", unused);
  list("positional tables", regenerated);
  list("notes", notes);
  return os.str();
}

namespace {

// The model-side name of a checkpoint tensor, or "" (with *why) when it is an expected drop.
std::string map_name(const std::string& name, bool model_pretrain, bool ckpt_pretrain, std::string* why) {
  if (model_pretrain == ckpt_pretrain) return name;
  if (!model_pretrain) {  // pretraining checkpoint -> fine-tune model
    if (starts_with(name, "encoder.norm.")) {
      *why = "VideoMAE's fine-tune model has no final encoder norm under mean pooling";
      return "";
    }
    if (starts_with(name, "encoder.")) return name.substr(8);
    if (starts_with(name, "decoder.") || starts_with(name, "encoder_to_decoder.") || name == "mask_token") {
      *why = "pretraining decoder";
      return "";
    }
    return name;
  }
  // fine-tune checkpoint -> pretraining model: its encoder.
  if (starts_with(name, "fc_norm.") || starts_with(name, "head.")) {
    *why = "classifier of a fine-tuned checkpoint";
    return "";
  }
  if (starts_with(name, "patch_embed.") || starts_with(name, "blocks.") || starts_with(name, "norm.") ||
      name == "pos_embed")
    return "encoder." + name;
  return name;
}

}  // namespace

LoadReport load_videomae(const std::string& path, const VideoMAEConfig& config, std::vector<Param>& params,
                         const VideoMAELoadOptions& options) {
  config.validate();
  std::map<std::string, Param*> model;
  for (auto& p : params) model[p.name] = &p;
  const bool model_pretrain = model.count("encoder.patch_embed.proj.weight") != 0;
  if (!model_pretrain && !model.count("patch_embed.proj.weight"))
    throw Error(
        "load_videomae: the model's parameters have no patch_embed.proj.weight or "
        "encoder.patch_embed.proj.weight; they are not a VideoMAE model's");

  VideoMAECheckpoint ck = read_videomae_checkpoint(path);
  LoadReport r;
  r.source = ck.source;
  r.format = ck.format;
  r.naming = ck.naming;
  r.notes = ck.notes;
  r.checkpoint_config = ck.config;
  for (const auto& [n, t] : ck.tensors)
    if (starts_with(n, "encoder.")) r.pretrain_checkpoint = true;
  const std::string where = "load_videomae: " + ck.source;

  // The config: width, depth, heads, patch and tubelet must agree; clip length and size may not.
  std::vector<std::string> problems;
  if (ck.config) {
    const VideoMAEConfig& k = ck.config->config;
    for (const auto& n : ck.config->notes) r.notes.push_back(n);
    auto same = [&](const char* what, int64_t a, int64_t b) {
      if (a != b)
        problems.push_back(std::string(what) + ": checkpoint " + std::to_string(a) + ", model " + std::to_string(b));
    };
    same("hidden size (dim)", k.dim, config.dim);
    same("depth", k.depth, config.depth);
    same("attention heads", k.heads, config.heads);
    same("patch size", k.patch, config.patch);
    same("tubelet size", k.tubelet, config.tubelet);
    same("MLP hidden size", k.mlp_hidden(k.dim), config.mlp_hidden(config.dim));
    if (model_pretrain && r.pretrain_checkpoint) {
      same("decoder hidden size", k.decoder_dim, config.decoder_dim);
      same("decoder depth", k.decoder_depth, config.decoder_depth);
      same("decoder heads", k.decoder_heads, config.decoder_heads);
    }
    if (k.num_frames != config.num_frames || k.img_size != config.img_size)
      r.notes.push_back("checkpoint clips are " + std::to_string(k.num_frames) + " frames of " +
                        std::to_string(k.img_size) + "px, the model's " + std::to_string(config.num_frames) + " of " +
                        std::to_string(config.img_size) + "px");
  } else {
    r.notes.push_back("no config.json: attention heads cannot be checked from the weights");
  }
  if (!problems.empty())
    throw Error(where, ": the checkpoint's config differs from the model's: ", join_list(problems),
                Hint("build the model with the checkpoint's config (read_videomae_config / --config from-file)"));

  // Map every checkpoint tensor to a model name.
  std::map<std::string, Tensor> found;  // model name -> checkpoint tensor
  std::map<std::string, std::string> origin;
  for (const auto& [name, t] : ck.tensors) {
    std::string why;
    const std::string m = map_name(name, model_pretrain, r.pretrain_checkpoint, &why);
    if (m.empty()) {
      r.dropped.push_back(name + " (" + why + ")");
      continue;
    }
    found[m] = t;
    origin[m] = name;
  }

  // Positional tables that are buffers in the checkpoint, not parameters of the model.
  const int64_t gt = config.grid_t(), ghw = config.grid_hw(), tokens = config.num_patches();
  for (auto it = found.begin(); it != found.end();) {
    const std::string& m = it->first;
    if (!is_pos_table(m) || model.count(m)) {
      ++it;
      continue;
    }
    const Tensor t = as_f32(it->second, origin[m]);
    const int64_t dim = starts_with(m, "decoder.") ? config.decoder_dim : config.dim;
    const bool shape_ok = (t.ndim() == 3 && t.size(0) == 1) || t.ndim() == 2;
    if (!shape_ok || t.size(-1) != dim) {
      problems.push_back(origin[m] + " is " + t.shape().str() + ", expected [1, tokens, " + std::to_string(dim) + "]");
    } else {
      const double dist = sinusoid_distance(t);
      if (dist > sinusoid_tolerance(t)) {
        problems.push_back(origin[m] + " " + t.shape().str() + " is a learned table (it differs from the fixed " +
                           "sinusoid by up to " + std::to_string(dist) +
                           "); this model uses the fixed sinusoid table and has no parameter to hold it");
      } else if (t.size(-2) == tokens) {
        r.regenerated.push_back(origin[m] + ": the fixed sinusoid table of " + grid_str(gt, ghw, ghw) +
                                " (checked; the model computes the same)");
      } else {
        r.regenerated.push_back(origin[m] + ": fixed sinusoid table of " + std::to_string(t.size(-2)) +
                                " tokens regenerated for " + grid_str(gt, ghw, ghw));
      }
    }
    it = found.erase(it);
  }

  // Match every model parameter.
  std::vector<std::string> missing, mismatched, fatal_missing;
  std::vector<std::pair<Param*, Tensor>> plan;
  std::set<std::string> loaded_names;
  for (auto& p : params) {
    auto it = found.find(p.name);
    if (it == found.end()) {
      missing.push_back(p.name);
      continue;
    }
    Tensor t = it->second;
    const std::string& src = origin[p.name];
    if (is_pos_table(p.name) && t.shape() != p.value.shape()) {
      // A learned table into a model that has one: resample from the checkpoint's grid.
      const Tensor f = as_f32(t, src);
      const int64_t n = f.size(-2);
      int64_t ft = 0, fh = 0, fw = 0;
      if (ck.config && ck.config->config.num_patches() == n)
        ft = ck.config->config.grid_t(), fh = fw = ck.config->config.grid_hw();
      else if (n % (ghw * ghw) == 0)
        ft = n / (ghw * ghw), fh = fw = ghw;
      else if (n % gt == 0 &&
               int64_t(std::lround(std::sqrt(double(n / gt)))) * int64_t(std::lround(std::sqrt(double(n / gt)))) ==
                   n / gt)
        ft = gt, fh = fw = int64_t(std::lround(std::sqrt(double(n / gt))));
      const int64_t dim = p.value.size(-1);
      if (ft == 0 || f.ndim() != 3 || f.size(0) != 1 || f.size(2) != dim) {
        check_position_table(src, f, gt, ghw, ghw, dim);  // throws, naming both grids
      }
      t = train::resample_table(f, ft, fh, fw, gt, ghw, ghw).view(p.value.shape());
      r.regenerated.push_back(src + ": learned table interpolated from " + grid_str(ft, fh, fw) + " to " +
                              grid_str(gt, ghw, ghw));
    }
    if (t.shape() != p.value.shape()) {
      mismatched.push_back(src + " is " + t.shape().str() + ", the model's " + p.name + " is " + p.value.shape().str());
      continue;
    }
    if (t.dtype() != DType::f32 && t.dtype() != DType::f16 && t.dtype() != DType::bf16 && t.dtype() != DType::f64) {
      mismatched.push_back(src + " has dtype " + std::string(dtype_name(t.dtype())) + ", not a float type");
      continue;
    }
    plan.emplace_back(&p, t);
    loaded_names.insert(p.name);
  }
  // Missing parameters: allowed prefixes keep their init, except a bias whose qkv was loaded.
  for (const auto& name : missing) {
    const bool bias = ends_with(name, "attn.q_bias") || ends_with(name, "attn.v_bias");
    if (bias && loaded_names.count(name.substr(0, name.size() - std::strlen("q_bias")) + "qkv.weight")) {
      fatal_missing.push_back(name +
                              " (its block's qkv.weight is in the checkpoint: VideoMAE's attention has "
                              "q_bias and v_bias, never an implicit zero)");
      continue;
    }
    bool allowed = false;
    for (const auto& pre : options.allow_missing_prefixes) allowed = allowed || starts_with(name, pre);
    (allowed ? r.kept_init : fatal_missing).push_back(name);
  }
  for (const auto& [m, t] : found)
    if (!model.count(m)) r.unused.push_back(origin[m] + " " + t.shape().str());

  if (!fatal_missing.empty())
    problems.push_back(std::to_string(fatal_missing.size()) +
                       " model parameter(s) missing from the checkpoint: " + join_list(fatal_missing));
  if (!mismatched.empty())
    problems.push_back(std::to_string(mismatched.size()) + " shape mismatch(es): " + join_list(mismatched));
  if (options.strict && !r.unused.empty())
    problems.push_back(std::to_string(r.unused.size()) +
                       " checkpoint tensor(s) have no place in the model (strict): " + join_list(r.unused));
  if (!problems.empty())
    throw Error(where, ": cannot load into the ", model_pretrain ? "pretraining" : "fine-tune",
                " model: ", join_list(problems, 8),
                Hint(fatal_missing.empty() || !r.pretrain_checkpoint || model_pretrain
                         ? "check that the checkpoint and the model have the same size (--config)"
                         : "fine-tuning from a pretraining checkpoint: allow the new head with "
                           "allow_missing_prefixes {\"head.\", \"fc_norm.\"}"));

  // All checks passed: copy.
  bool converted = false;
  for (auto& [p, t] : plan) {
    converted = converted || t.dtype() != DType::f32;
    p->value.copy_from(as_f32(t, p->name));
  }
  if (converted) r.notes.push_back("converted f16 / bf16 / f64 tensors to f32");
  r.loaded = int64_t(plan.size());
  return r;
}

}  // namespace unmask::video
