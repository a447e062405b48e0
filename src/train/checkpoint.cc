// train/checkpoint.cc: write / list / read training checkpoints (see checkpoint.h).
#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>

#include "io/file.h"
#include "io/safetensors.h"
#include "unmask/error.h"

namespace unmask::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFormat = "unmask-trainer-state";
constexpr int kStateVersion = 1;

std::mutex g_fault_mutex;
bool g_fault_set = false;
std::string g_fault;

std::string fault_stage() {
  std::lock_guard<std::mutex> lock(g_fault_mutex);
  if (g_fault_set) return g_fault;
  const char* env = std::getenv("UNMASK_CHECKPOINT_FAULT");
  return env ? env : "";
}

// Simulates a failure (a full disk) at `stage` when asked to.
void maybe_fail(const std::string& stage, const std::string& path) {
  if (fault_stage() == stage)
    throw Error("cannot write ", path, ": No space left on device (injected by UNMASK_CHECKPOINT_FAULT=", stage, ")");
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open ", path, " to fsync it: ", std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw Error("fsync of ", path, " failed: ", std::strerror(err));
}

// Parses "step-000200" -> 200; -1 for other names.
int64_t step_of(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() <= 5) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    if (v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

nlohmann::json metrics_json(const CheckpointMetrics& m) {
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"loss", num(m.loss)},         {"accuracy", num(m.accuracy)},     {"lr", num(m.lr)},
                      {"grad_norm", num(m.grad_norm)}, {"first_loss", num(m.first_loss)}, {"elapsed_s", num(m.elapsed_s)},
                      {"samples", m.samples},        {"tokens", m.tokens}};
  nlohmann::json extras = nlohmann::json::array();
  for (const auto& [name, v] : m.extras) extras.push_back({name, num(v)});
  j["extras"] = extras;
  return j;
}

std::string state_json(const TrainerState& s) {
  nlohmann::json j;
  j["format"] = kStateFormat;
  j["version"] = kStateVersion;
  j["step"] = s.step;
  j["optimizer_step"] = s.optimizer_step;
  j["phase"] = s.phase;
  j["seed"] = s.seed;
  auto position = [](const data::LoaderPosition& p) {
    return nlohmann::json{{"epoch", p.epoch}, {"file_index", p.file_index}, {"sample_index", p.sample_index}};
  };
  j["loader"] = position(s.loader);
  j["data_sharding"] = s.data_sharding;
  if (s.loss_scale > 0) j["loss_scale"] = {{"scale", s.loss_scale}, {"good_steps", s.loss_scale_good_steps}};
  if (!s.rank_loaders.empty()) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const data::LoaderPosition& p : s.rank_loaders) ranks.push_back(position(p));
    j["rank_loaders"] = ranks;
  }
  if (!s.data.empty()) j["data"] = s.data;
  j["config_hash"] = s.config_hash;
  j["config"] = s.config;
  j["metrics"] = metrics_json(s.metrics);
  return j.dump(2) + "\n";
}

}  // namespace

void set_checkpoint_fault(const std::string& stage) {
  std::lock_guard<std::mutex> lock(g_fault_mutex);
  g_fault_set = !stage.empty();
  g_fault = stage;
}

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", (long long)step);
  return buf;
}

std::string checkpoints_root(const std::string& run_dir) { return run_dir + "/checkpoints"; }

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  const std::string root = checkpoints_root(run_dir);
  if (!fs::is_directory(root, ec)) return {};
  for (const auto& e : fs::directory_iterator(root, ec)) {
    int64_t step = step_of(e.path().filename().string());
    if (step < 0 || !e.is_directory(ec)) continue;
    if (!fs::exists(e.path() / kStateFile, ec)) continue;  // incomplete: not a checkpoint
    found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::string latest_checkpoint(const std::string& run_dir) {
  auto all = list_checkpoints(run_dir);
  return all.empty() ? "" : all.back();
}

std::string resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  if (fs::exists(fs::path(path) / kStateFile, ec)) return path;
  if (!fs::is_directory(path, ec))
    throw Error("cannot resume from ", path, ": no such directory", Hint("pass a run directory or one of its checkpoints/step-*"));
  std::string last = latest_checkpoint(path);
  if (last.empty())
    throw Error("cannot resume from ", path, ": it holds no complete checkpoint (no checkpoints/step-*/", kStateFile, ")",
                Hint("start without --resume, or point --resume at the run directory of an earlier run"));
  return last;
}

std::string checkpoint_model_dir(const std::string& checkpoint_dir) {
  std::error_code ec;
  return fs::is_directory(fs::path(checkpoint_dir) / "model", ec) ? checkpoint_dir + "/model" : checkpoint_dir;
}

bool is_training_checkpoint(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / kStateFile, ec);
}

void remove_stale_checkpoint_temporaries(const std::string& run_dir) {
  std::error_code ec;
  const std::string root = checkpoints_root(run_dir);
  if (!fs::is_directory(root, ec)) return;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(".tmp-", 0) == 0 || name.rfind(".old-", 0) == 0) stale.push_back(e.path());
  }
  for (const auto& p : stale) fs::remove_all(p, ec);
}

std::string write_checkpoint(const std::string& run_dir, const BertTrainModel& model, const Optimizer& optimizer,
                             const TrainerState& state, const CheckpointWriteOptions& options) {
  return write_checkpoint(
      run_dir, [&](const std::string& dir) { model.save_pretrained(dir, options.vocab_path, options.tokenizer); },
      optimizer, state, options.keep_last);
}

std::string write_checkpoint(const std::string& run_dir, const std::function<void(const std::string&)>& save_model,
                             const Optimizer& optimizer, const TrainerState& state, int64_t keep_last) {
  const std::string root = checkpoints_root(run_dir);
  const std::string name = checkpoint_name(state.step);
  const std::string final_dir = root + "/" + name;
  const std::string tmp = root + "/.tmp-" + name + "-" + std::to_string(::getpid());
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw Error("cannot create ", root, ": ", ec.message(), Hint("check that the run directory is writable"));
  const std::string previous = latest_checkpoint(run_dir);
  fs::remove_all(tmp, ec);
  std::string stage = "model";
  try {
    // 1. the model's own files (BERT: an HF model directory)
    maybe_fail("model", tmp + "/model/model.safetensors");
    save_model(tmp + "/model");
    // 2. optimizer moments
    stage = "optimizer";
    OptimizerState os = optimizer.state();
    maybe_fail("optimizer", tmp + "/" + kOptimizerFile);
    io::write_safetensors(tmp + "/" + kOptimizerFile, os.tensors,
                          {{"format", "unmask-optimizer"},
                           {"optimizer", optimizer.config().kind == OptimizerKind::adamw ? "adamw" : "lamb"},
                           {"step", std::to_string(os.step)}});
    // 3. the trainer state, last: its presence marks a complete checkpoint
    stage = "state";
    maybe_fail("state", tmp + "/" + kStateFile);
    io::write_file_atomic(tmp + "/" + std::string(kStateFile), state_json(state));
    fsync_path(tmp);
    // 4. publish: rename into place (an existing directory of the same step is moved aside first)
    stage = "publish";
    maybe_fail("publish", final_dir);
    std::string old;
    if (fs::exists(final_dir, ec)) {
      old = root + "/.old-" + name + "-" + std::to_string(::getpid());
      fs::remove_all(old, ec);
      fs::rename(final_dir, old);
    }
    fs::rename(tmp, final_dir);
    fsync_path(root);
    if (!old.empty()) fs::remove_all(old, ec);
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    throw Error("checkpoint ", final_dir, " was not written (", stage, " stage failed): ", e.what(),
                Hint(previous.empty() ? std::string("no earlier checkpoint exists; free disk space and start again")
                                      : "the previous checkpoint " + previous +
                                            " is intact; free disk space and continue with --resume"));
  }
  // 5. prune: the oldest complete checkpoints beyond keep_last (never the one just written)
  if (keep_last > 0) {
    auto all = list_checkpoints(run_dir);
    int64_t excess = int64_t(all.size()) - keep_last;
    for (int64_t i = 0; i < excess; ++i)
      if (all[size_t(i)] != final_dir) fs::remove_all(all[size_t(i)], ec);
  }
  return final_dir;
}

TrainerState read_trainer_state(const std::string& checkpoint_dir) {
  const std::string path = checkpoint_dir + "/" + kStateFile;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path, " is not valid JSON: ", e.what(), Hint("the checkpoint is damaged; resume from an earlier one"));
  }
  TrainerState s;
  try {
    if (j.value("format", "") != kStateFormat) throw Error("not an unmask trainer state (format '", j.value("format", ""), "')");
    if (j.value("version", 0) != kStateVersion) throw Error("version ", j.value("version", 0), " (this build reads ", kStateVersion, ")");
    s.step = j.at("step").get<int64_t>();
    s.optimizer_step = j.at("optimizer_step").get<int64_t>();
    s.phase = j.at("phase").get<int>();
    s.seed = j.at("seed").get<uint64_t>();
    auto position = [](const nlohmann::json& l) {
      data::LoaderPosition p;
      p.epoch = l.at("epoch").get<int64_t>();
      p.file_index = l.at("file_index").get<int64_t>();
      p.sample_index = l.at("sample_index").get<int64_t>();
      if (p.epoch < 0 || p.file_index < 0 || p.sample_index < 0) throw Error("a negative loader position");
      return p;
    };
    s.loader = position(j.at("loader"));
    s.data_sharding = j.value("data_sharding", "batch");  // absent in checkpoints of earlier builds
    if (auto it = j.find("loss_scale"); it != j.end()) {
      s.loss_scale = it->at("scale").get<double>();
      s.loss_scale_good_steps = it->at("good_steps").get<int64_t>();
    }
    if (auto it = j.find("rank_loaders"); it != j.end())
      for (const auto& l : *it) s.rank_loaders.push_back(position(l));
    s.config_hash = j.at("config_hash").get<std::string>();
    s.config = j.at("config").get<std::map<std::string, std::string>>();
    const auto& m = j.at("metrics");
    auto num = [&](const char* k) {
      auto it = m.find(k);
      return it == m.end() || it->is_null() ? std::numeric_limits<double>::quiet_NaN() : it->get<double>();
    };
    s.metrics.loss = num("loss");
    s.metrics.accuracy = num("accuracy");
    s.metrics.lr = num("lr");
    s.metrics.grad_norm = num("grad_norm");
    s.metrics.first_loss = num("first_loss");
    s.metrics.elapsed_s = m.value("elapsed_s", 0.0);
    s.metrics.samples = m.value("samples", m.value("sequences", int64_t(0)));  // "sequences": BERT-only builds
    s.metrics.tokens = m.value("tokens", int64_t(0));
    if (auto it = m.find("extras"); it != m.end())
      for (const auto& e : *it)
        s.metrics.extras.emplace_back(e.at(0).get<std::string>(),
                                      e.at(1).is_null() ? std::numeric_limits<double>::quiet_NaN() : e.at(1).get<double>());
    if (auto it = j.find("data"); it != j.end()) s.data = it->get<std::map<std::string, int64_t>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path, ": ", e.what(), Hint("the checkpoint is damaged; resume from an earlier one"));
  } catch (const Error& e) {
    throw Error(path, ": ", e.what());
  }
  return s;
}

OptimizerState read_optimizer_state(const std::string& checkpoint_dir, std::string* optimizer_kind) {
  const std::string path = checkpoint_dir + "/" + kOptimizerFile;
  auto file = io::SafeTensorsFile::open(path);
  OptimizerState st;
  const auto& meta = file.metadata();
  auto it = meta.find("step");
  if (it == meta.end()) throw Error(path, ": metadata has no \"step\"", Hint("the checkpoint is damaged"));
  try {
    st.step = std::stoll(it->second);
  } catch (const std::exception&) {
    throw Error(path, ": metadata step '", it->second, "' is not an integer");
  }
  if (optimizer_kind) *optimizer_kind = meta.count("optimizer") ? meta.at("optimizer") : "";
  for (const auto& info : file.tensors()) st.tensors.emplace_back(info.name, file.tensor(info.name));
  return st;
}

}  // namespace unmask::train
