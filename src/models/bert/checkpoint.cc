// models/bert_checkpoint.cc
#include "models/bert/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "io/file.h"
#include "io/torch_pickle.h"
#include "unmask/error.h"

namespace unmask {

namespace {

namespace fs = std::filesystem;

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}
bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// "bert-base-uncased", "google-bert/bert-base-uncased": what a Hub id looks like (and a local
// path that exists never reaches this test).
bool looks_like_hub_id(const std::string& s) {
  static const std::regex id(R"(^[A-Za-z0-9][A-Za-z0-9_.\-]*(/[A-Za-z0-9][A-Za-z0-9_.\-]*)?$)");
  return std::regex_match(s, id) && s.find("..") == std::string::npos;
}

// The step of a DLE checkpoint file name "ckpt_<step>.pt"; -1 otherwise.
long long dle_step(const std::string& name) {
  static const std::regex re(R"(^ckpt_([0-9]{1,18})\.pt$)");  // 18 digits: no int64 overflow
  std::smatch m;
  return std::regex_match(name, m, re) ? std::stoll(m[1]) : -1;
}

// Where the weights are, before anything is read: the directory and, when the path named one
// file, that file.
struct Location {
  fs::path dir, file;
  fs::path config;  // config.json or bert_config.json
};

Location locate(const std::string& path) {
  Location loc;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (looks_like_hub_id(path))
      throw Error("--model ", path, ": no such file or directory here. unmask reads local files only and downloads "
                  "nothing; '", path, "' looks like a Hugging Face Hub id",
                  Hint("fetch it first, e.g. `huggingface-cli download " + path + " --local-dir models/" + path +
                       "` (or `git clone https://huggingface.co/" + path + " models/" + path +
                       "`), then pass --model models/" + path));
    throw Error("model ", path, " does not exist", Hint("pass a model directory (config.json + weights) or a weights file"));
  }
  if (is_dir(path)) {
    loc.dir = path;
    // A training checkpoint (checkpoints/step-N): its model is in model/, beside the optimizer
    // and trainer state.
    if (is_file(loc.dir / "trainer_state.json") && is_dir(loc.dir / "model")) loc.dir /= "model";
  } else {
    loc.file = path;
    loc.dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  }
  for (const char* name : {"config.json", "bert_config.json"})
    if (is_file(loc.dir / name)) {
      loc.config = loc.dir / name;
      break;
    }
  if (!loc.config.empty()) return loc;
  // No config: a run directory of `unmask pretrain` (its checkpoints are model directories)?
  const fs::path ckpts = loc.dir / "checkpoints";
  std::vector<std::string> steps;
  if (is_dir(ckpts))
    for (const auto& e : fs::directory_iterator(ckpts, ec))
      if (e.path().filename().string().rfind("step-", 0) == 0 &&
          (is_file(e.path() / "model" / "config.json") || is_file(e.path() / "config.json")))
        steps.push_back(e.path().filename().string());
  std::sort(steps.begin(), steps.end());
  if (!steps.empty())
    throw Error("model ", loc.dir.string(), " is a training run directory, not a model: its checkpoints are in ",
                ckpts.string(), " (", steps.size(), ": ", steps.front(), steps.size() > 1 ? " ... " + steps.back() : "",
                ")", Hint("pass one of them, e.g. --model " + (ckpts / steps.back()).string()));
  throw Error("model ", loc.dir.string(), " holds no config.json (Hugging Face) or bert_config.json (NVIDIA DLE)",
              Hint("a BERT model directory holds config.json and its weights (model.safetensors or pytorch_model.bin)"));
}

// DistributedDataParallel's "module." prefixes, gone.
std::string strip_ddp_prefix(std::string name) {
  while (name.rfind("module.", 0) == 0) name.erase(0, 7);
  return name;
}

// A torch.save file's model state dict as an in-memory safetensors image; DDP's "module."
// prefixes go.
io::SafeTensorsFile torch_weights(const std::string& file, std::string* from) {
  const io::TorchCheckpoint ckpt = io::read_torch_checkpoint(file);
  std::vector<std::pair<std::string, Tensor>> sd = io::torch_state_dict(ckpt, from);
  if (sd.empty())
    throw Error("pytorch checkpoint ", file, " holds no tensors under model / module / state_dict or at the top level",
                Hint("save the model's state_dict() with torch.save"));
  for (auto& [name, t] : sd) name = strip_ddp_prefix(name);
  return io::SafeTensorsFile::from_tensors(sd, file);
}

bool has_dense_act(const std::vector<io::SafeTensorsFile>& files) {
  for (const auto& f : files)
    for (const auto& t : f.tensors())
      if (t.name.find(".dense_act.") != std::string::npos) return true;
  return false;
}

}  // namespace

std::string bert_checkpoint_dir(const std::string& path) { return locate(path).dir.string(); }

BertConfig read_bert_checkpoint_config(const std::string& path) {
  return BertConfig::from_json_file(locate(path).config.string());
}

BertCheckpoint open_bert_checkpoint(const std::string& path) {
  const Location loc = locate(path);
  BertCheckpoint c;
  c.dir = loc.dir.string();
  c.config = BertConfig::from_json_file(loc.config.string());
  auto open_file = [&](const fs::path& f) {
    if (f.extension() != ".safetensors") {
      uint8_t head[512] = {};
      std::ifstream in(f, std::ios::binary);
      in.read(reinterpret_cast<char*>(head), sizeof head);
      if (!io::looks_like_torch_file(head, size_t(in.gcount())))
        throw Error("weights ", f.string(), " are neither safetensors nor a torch.save file",
                    Hint("pass a .safetensors, .bin, .pt or .pth file, or the model directory"));
    }
    c.origin = f.string();
    if (f.extension() == ".safetensors") {
      c.layout = "safetensors";
      c.files.push_back(io::SafeTensorsFile::open(f.string()));
    } else {
      c.layout = "torch.save " + f.filename().string();
      c.files.push_back(torch_weights(f.string(), nullptr));
    }
  };
  if (!loc.file.empty()) {
    open_file(loc.file);
  } else if (is_file(loc.dir / "model.safetensors") || is_file(loc.dir / "model.safetensors.index.json")) {
    c.layout = "safetensors", c.origin = c.dir;
    c.files = io::open_model_weights(c.dir);
  } else if (is_file(loc.dir / "pytorch_model.bin")) {
    open_file(loc.dir / "pytorch_model.bin");
  } else if (is_file(loc.dir / "pytorch_model.bin.index.json")) {
    c.layout = "pytorch_model.bin shards", c.origin = (loc.dir / "pytorch_model.bin.index.json").string();
    c.files = io::open_indexed_shards(
        c.origin, [](const std::string& shard) { return torch_weights(shard, nullptr); }, strip_ddp_prefix);
  } else {
    // DLE keeps its last three ckpt_<step>.pt; the highest step is the newest.
    fs::path best;
    long long best_step = -1;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(loc.dir, ec))
      if (const long long s = dle_step(e.path().filename().string()); s > best_step) best_step = s, best = e.path();
    if (best_step < 0) {
      c.files = io::open_model_weights(c.dir);  // its error says what the directory holds
    } else {
      open_file(best);
      c.layout = "NVIDIA DLE " + best.filename().string();
      c.notes.push_back("read " + best.string() + " (the highest step of the directory's ckpt_*.pt)");
    }
  }
  if (has_dense_act(c.files))
    c.notes.push_back("NVIDIA DLE weights (dense_act names read as dense); hidden_act \"" +
                      std::string(c.config.hidden_act == HiddenAct::gelu ? "gelu" : "gelu_tanh") +
                      "\" as bert_config.json says (DLE's gelu is the erf form)");
  return c;
}

}  // namespace unmask
