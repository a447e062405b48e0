// train/config.cc: the TOML-subset parser and the key table of PretrainConfig.
//
// One table (kKeys) drives everything: parsing, --set overrides, validation of each value
// (with the file:line of the assignment), the canonical dump in trainer_state.json, the hash
// a resumed run is compared with, and the "did you mean" suggestion for an unknown key.
#include "train/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
#include <sstream>

#include "io/file.h"
#include "ops/device_info.h"
#include "unmask/error.h"

namespace unmask::train {

namespace {

// A parsed right-hand side.
struct Value {
  enum class Kind : uint8_t { string, integer, number, boolean } kind = Kind::string;
  std::string text;  // the source text (for messages)
  std::string s;
  int64_t i = 0;
  double d = 0;
  bool b = false;
};

// A string in file syntax (the escapes parse_value reads back).
std::string quoted(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else o += c;
  }
  return o + "\"";
}

// Canonical text of a double: shortest form that reads back exactly.
std::string number_text(double v) {
  char buf[64];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // stays a float in TOML
  return s;
}

struct KeyDef {
  const char* name;
  const char* type;  // "string" | "int" | "float" | "bool" | "a|b|c"
  bool numeric;      // changes the numbers of the run (part of numeric_hash)
  const char* help;
  // Sets the field from a value; throws a message (without location) on a bad value.
  std::function<void(PretrainConfig&, const Value&)> set;
  std::function<std::string(const PretrainConfig&)> get;  // canonical TOML text
};

[[noreturn]] void bad(const KeyDef& k, const Value& v, const std::string& want) {
  throw Error(k.name, " must be ", want, ", got ", v.text);
}

std::string as_string(const KeyDef& k, const Value& v) {
  if (v.kind != Value::Kind::string) bad(k, v, "a string (in double quotes)");
  return v.s;
}
int64_t as_int(const KeyDef& k, const Value& v, int64_t lo, const char* what) {
  if (v.kind != Value::Kind::integer) bad(k, v, std::string("an integer ") + what);
  if (v.i < lo) bad(k, v, std::string("an integer ") + what);
  return v.i;
}
double as_float(const KeyDef& k, const Value& v, double lo, double hi, bool lo_open, bool hi_open, const char* what) {
  double x;
  if (v.kind == Value::Kind::integer) x = double(v.i);
  else if (v.kind == Value::Kind::number) x = v.d;
  else bad(k, v, std::string("a number ") + what);
  bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  if (!ok) bad(k, v, std::string("a number ") + what);
  return x;
}
bool as_bool(const KeyDef& k, const Value& v) {
  if (v.kind != Value::Kind::boolean) bad(k, v, "true or false");
  return v.b;
}
std::string as_choice(const KeyDef& k, const Value& v) {
  std::string choices = k.type;
  std::string s = v.kind == Value::Kind::string ? v.s : v.text;
  std::stringstream ss(choices);
  for (std::string c; std::getline(ss, c, '|');)
    if (c == s) return s;
  std::string shown = choices;
  std::replace(shown.begin(), shown.end(), '|', ',');
  bad(k, v, "one of " + shown);
}

constexpr double kInf = HUGE_VAL;

#define STR_KEY(field, numeric, help)                                                                 \
  KeyDef{#field, "string", numeric, help, [](PretrainConfig& c, const Value& v) { c.field = v.s; }, \
         [](const PretrainConfig& c) { return quoted(c.field); }}

const std::vector<KeyDef>& keys() {
  static const std::vector<KeyDef> table = [] {
    std::vector<KeyDef> t;
    t.push_back({"model", "string", true,
                 "HF model directory to start from, or random:tiny|mini|small|medium|base|large (vocab size from `vocab`)",
                 [](PretrainConfig& c, const Value& v) { c.model = v.s; },
                 [](const PretrainConfig& c) { return quoted(c.model); }});
    t.push_back(STR_KEY(vocab, true, "vocab.txt (default: the model directory's vocab.txt)"));
    t.push_back(STR_KEY(data, true, "directory of HDF5 shards (unmask prepare-text, or DLE's hdf5_* directories)"));
    t.push_back(STR_KEY(output, false, "run directory: checkpoints/step-NNNNNN/, metrics.jsonl, loss.svg"));
    t.push_back(STR_KEY(init_checkpoint, true,
                        "phase 2: start from this checkpoint's weights and optimizer moments, optimizer step reset to 0"));
    t.push_back({"optimizer", "lamb|adamw", true, "LAMB (apex FusedLAMB as DLE) or AdamW (torch.optim.AdamW)",
                 [](PretrainConfig& c, const Value& v) {
                   c.optimizer = v.s == "adamw" ? OptimizerKind::adamw : OptimizerKind::lamb;
                 },
                 [](const PretrainConfig& c) { return quoted(optimizer_name(c.optimizer)); }});
    auto float_key = [&](const char* name, double PretrainConfig::*field, double lo, double hi, bool lo_open,
                         bool hi_open, const char* what, bool numeric, const char* help) {
      t.push_back({name, "float", numeric, help,
                   [=](PretrainConfig& c, const Value& v) {
                     KeyDef self{name, "float", numeric, help, {}, {}};
                     c.*field = as_float(self, v, lo, hi, lo_open, hi_open, what);
                   },
                   [=](const PretrainConfig& c) { return number_text(c.*field); }});
    };
    auto int_key = [&](const char* name, int64_t PretrainConfig::*field, int64_t lo, const char* what, bool numeric,
                       const char* help) {
      t.push_back({name, "int", numeric, help,
                   [=](PretrainConfig& c, const Value& v) {
                     KeyDef self{name, "int", numeric, help, {}, {}};
                     c.*field = as_int(self, v, lo, what);
                   },
                   [=](const PretrainConfig& c) { return std::to_string(c.*field); }});
    };
    auto bool_key = [&](const char* name, bool PretrainConfig::*field, bool numeric, const char* help) {
      t.push_back({name, "bool", numeric, help,
                   [=](PretrainConfig& c, const Value& v) {
                     KeyDef self{name, "bool", numeric, help, {}, {}};
                     c.*field = as_bool(self, v);
                   },
                   [=](const PretrainConfig& c) { return std::string(c.*field ? "true" : "false"); }});
    };
    float_key("lr", &PretrainConfig::lr, 0, kInf, true, false, "> 0", true, "base learning rate (the schedule multiplies it)");
    float_key("beta1", &PretrainConfig::beta1, 0, 1, false, true, "in [0, 1)", true, "first-moment decay");
    float_key("beta2", &PretrainConfig::beta2, 0, 1, false, true, "in [0, 1)", true, "second-moment decay");
    float_key("eps", &PretrainConfig::eps, 0, kInf, true, false, "> 0", true, "added to sqrt(v)");
    float_key("weight_decay", &PretrainConfig::weight_decay, 0, kInf, false, false, ">= 0", true,
              "decoupled weight decay (not on biases and LayerNorm weights)");
    float_key("max_grad_norm", &PretrainConfig::max_grad_norm, -kInf, kInf, false, false, "(<= 0 disables)", true,
              "global gradient-norm clip before the update (<= 0 disables)");
    t.push_back({"schedule", "poly|cosine|linear|constant", true,
                 "lr schedule after linear warmup: poly (DLE, (1-p)^degree), cosine, linear decay, constant",
                 [](PretrainConfig& c, const Value& v) {
                   c.schedule = v.s == "cosine"   ? ScheduleConfig::Kind::cosine
                                : v.s == "linear" ? ScheduleConfig::Kind::linear
                                : v.s == "constant" ? ScheduleConfig::Kind::constant
                                                    : ScheduleConfig::Kind::poly;
                 },
                 [](const PretrainConfig& c) { return quoted(schedule_name(c.schedule)); }});
    float_key("warmup", &PretrainConfig::warmup, 0, 1, false, true, "in [0, 1)", true, "warmup as a fraction of `steps`");
    float_key("poly_degree", &PretrainConfig::poly_degree, 0, kInf, true, false, "> 0", true, "exponent of the poly schedule");
    int_key("steps", &PretrainConfig::steps, 1, ">= 1", true, "total optimizer steps");
    int_key("batch", &PretrainConfig::batch, 1, ">= 1", true, "micro-batch: sequences per forward/backward");
    int_key("accumulation", &PretrainConfig::accumulation, 1, ">= 1", true,
            "gradient accumulation: micro-batches per optimizer step (step batch = batch x accumulation)");
    int_key("max_seq", &PretrainConfig::max_seq, 2, ">= 2", true, "sequence length; must equal the shards'");
    int_key("max_pred", &PretrainConfig::max_pred, 1, ">= 1", true,
            "masked positions per sequence; must equal the shards' (dynamic masking: the cap)");
    bool_key("dynamic_masking", &PretrainConfig::dynamic_masking, true,
             "draw new masks per epoch and instance instead of the shards' static ones");
    float_key("masked_lm_prob", &PretrainConfig::masked_lm_prob, 0, 1, true, false, "in (0, 1]", true,
              "fraction of tokens masked (dynamic masking)");
    bool_key("prefetch", &PretrainConfig::prefetch, false, "read the next shard on a background thread");
    bool_key("overlap_allreduce", &PretrainConfig::overlap_allreduce, false,
             "data parallel: start each gradient bucket's all-reduce during the backward pass (same numbers either way)");
    t.push_back({"data_sharding", "batch|files|local", true,
                 "data parallel: batch (every rank reads the global batch, keeps its rows: same numbers on any rank "
                 "count), files (each epoch's shuffled shards r, r+N, ... on rank r, as DLE), local (data is this machine's part; {rank} allowed)",
                 [](PretrainConfig& c, const Value& v) {
                   c.data_sharding = v.s == "files" ? DataSharding::files : v.s == "local" ? DataSharding::local
                                                                                            : DataSharding::batch;
                 },
                 [](const PretrainConfig& c) { return quoted(data_sharding_name(c.data_sharding)); }});
    t.push_back({"device", "cpu|cuda", false,
                 "where the steps run: cpu, or cuda (CUDA builds; each rank of a host takes GPU local_rank % GPUs)",
                 [](PretrainConfig& c, const Value& v) { c.device = v.s == "cuda" ? Device::cuda : Device::cpu; },
                 [](const PretrainConfig& c) { return quoted(std::string(device_name(c.device))); }});
    t.push_back({"precision", "fp32|tf32|bf16|fp16", false,
                 "GEMM precision: fp32; device = \"cuda\": tf32 (TF32 tensor cores), bf16 or fp16 (operands rounded "
                 "to bf16 / fp16, fp32 accumulation, fp32 master weights; activations: see activations; fp16 needs loss_scaling = "
                 "\"dynamic\")",
                 [](PretrainConfig& c, const Value& v) {
                   c.precision = v.s == "bf16"   ? GemmPrecision::bf16
                                 : v.s == "fp16" ? GemmPrecision::fp16
                                 : v.s == "tf32" ? GemmPrecision::tf32
                                                 : GemmPrecision::fp32;
                 },
                 [](const PretrainConfig& c) { return quoted(precision_name(c.precision)); }});
    t.push_back({"activations", "f32|bf16", false,
                 "the encoder layers' activations: f32, or bf16 (saved activations, their gradients and the layer "
                 "GEMMs in bf16 with fp32 accumulation, bf16 copies of the layer weights rounded from the fp32 master "
                 "weights at every micro-batch's forward; half the activation memory and traffic). cuda: head size 64, 80, 88 or 128; "
                 "cpu: emulated (f32 arithmetic rounded to bf16, slower than f32: for checking)",
                 [](PretrainConfig& c, const Value& v) { c.activations = v.s == "bf16" ? DType::bf16 : DType::f32; },
                 [](const PretrainConfig& c) { return quoted(c.activations == DType::bf16 ? "bf16" : "f32"); }});
    t.push_back({"loss_scaling", "none|dynamic", false,
                 "dynamic: gradients of (scale x loss), unscaled before the update; a step whose gradients overflow "
                 "is skipped and the scale halved (fp16's guard; exact in fp32 with a power-of-two scale)",
                 [](PretrainConfig& c, const Value& v) { c.loss_scaling = v.s == "dynamic"; },
                 [](const PretrainConfig& c) { return quoted(c.loss_scaling ? "dynamic" : "none"); }});
    float_key("init_loss_scale", &PretrainConfig::init_loss_scale, 1, 16777216.0, false, false, "in [1, 2^24]", false,
              "the first loss scale (DLE: 2^20 = 1048576)");
    int_key("loss_scale_window", &PretrainConfig::loss_scale_window, 1, ">= 1", false,
            "finite steps in a row before the loss scale doubles");
    t.push_back({"seed", "int", true, "seed of the initial weights, data order, masking and dropout",
                 [](PretrainConfig& c, const Value& v) {
                   KeyDef self{"seed", "int", true, "", {}, {}};
                   c.seed = uint64_t(as_int(self, v, 0, ">= 0"));
                 },
                 [](const PretrainConfig& c) { return std::to_string(c.seed); }});
    float_key("hidden_dropout", &PretrainConfig::hidden_dropout, 0, 1, false, true, "in [0, 1)", true,
              "dropout after embeddings, attention output and FFN (0 = off)");
    float_key("attention_dropout", &PretrainConfig::attention_dropout, 0, 1, false, true, "in [0, 1)", true,
              "dropout on the attention probabilities (0 = off)");
    t.push_back({"threads", "int", false, "CPU threads (0 = all cores)",
                 [](PretrainConfig& c, const Value& v) {
                   KeyDef self{"threads", "int", false, "", {}, {}};
                   c.threads = int(std::min<int64_t>(as_int(self, v, 0, ">= 0"), 4096));
                 },
                 [](const PretrainConfig& c) { return std::to_string(c.threads); }});
    int_key("checkpoint_every", &PretrainConfig::checkpoint_every, 0, ">= 0", false,
            "save a checkpoint every N optimizer steps (0 = only at the end; always at the end)");
    int_key("keep_checkpoints", &PretrainConfig::keep_checkpoints, 0, ">= 0", false,
            "keep the last N checkpoints (0 = keep all)");
    int_key("log_every", &PretrainConfig::log_every, 1, ">= 1", false,
            "print a progress line every N steps when stderr is not a terminal");
    float_key("peak_gflops", &PretrainConfig::peak_gflops, 0, kInf, false, false, ">= 0", false,
              "fp32 peak GFLOP/s for MFU (0 = measure with an FMA loop at start)");
    return t;
  }();
  return table;
}

const KeyDef* find_key(const std::string& name) {
  for (const auto& k : keys())
    if (name == k.name) return &k;
  return nullptr;
}

std::string nearest_key(const std::string& name) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& k : keys())
    if (size_t d = edit_distance(name, k.name); d < best_d) best_d = d, best = k.name;
  return best_d <= std::max<size_t>(3, name.size() / 3) ? best : "";
}

// ---- lexing ----------------------------------------------------------------------------------

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Parses the value text (comment already removed, trimmed). `bare_strings`: an unquoted word
// that is no number or boolean is a string (command-line convenience).
Value parse_value(const std::string& text, bool bare_strings) {
  Value v;
  v.text = text;
  if (text.empty()) throw Error("missing value after '='");
  char q = text[0];
  if (q == '"' || q == '\'') {
    std::string out;
    size_t i = 1;
    for (; i < text.size() && text[i] != q; ++i) {
      char c = text[i];
      if (q == '"' && c == '\\') {
        if (++i >= text.size()) break;
        switch (text[i]) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          default: throw Error("unknown escape \\", text[i], " in ", text, Hint("use \\\\ for a backslash"));
        }
      } else {
        out += c;
      }
    }
    if (i >= text.size()) throw Error("unterminated string ", text, Hint("close it with " + std::string(1, q)));
    if (trim(text.substr(i + 1)) != "") throw Error("unexpected text after the string: ", text.substr(i + 1));
    v.kind = Value::Kind::string;
    v.s = out;
    return v;
  }
  if (text == "true" || text == "false") {
    v.kind = Value::Kind::boolean;
    v.b = text == "true";
    return v;
  }
  // Numbers: digits with single underscores between them, optional sign, fraction, exponent.
  std::string num;
  bool ok = !text.empty();
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '_') {
      if (i == 0 || i + 1 == text.size() || !std::isdigit((unsigned char)text[i - 1]) ||
          !std::isdigit((unsigned char)text[i + 1]))
        ok = false;
      continue;
    }
    num += c;
  }
  if (ok) {
    char* end = nullptr;
    errno = 0;
    long long ll = std::strtoll(num.c_str(), &end, 10);
    if (end && *end == '\0' && errno == 0 && !num.empty()) {
      v.kind = Value::Kind::integer;
      v.i = ll;
      return v;
    }
    bool plausible = !num.empty() && (std::isdigit((unsigned char)num[0]) || num[0] == '-' || num[0] == '+' || num[0] == '.');
    double d = plausible ? std::strtod(num.c_str(), &end) : 0;
    if (plausible && end && *end == '\0' && std::isfinite(d)) {
      v.kind = Value::Kind::number;
      v.d = d;
      return v;
    }
  }
  if (bare_strings) {
    v.kind = Value::Kind::string;
    v.s = text;
    return v;
  }
  throw Error("cannot read the value ", text,
              Hint("strings go in double quotes (key = \"text\"); numbers like 6e-3; booleans true/false"));
}

// One `key = value` line (comment stripped, trimmed, not a section header): the key, checked
// (letters, digits, '_', and '-' where `dashes`), and its value; errors name `where`.
std::pair<std::string, Value> parse_assignment(const std::string& line, const std::string& where, bool dashes) {
  const size_t eq = line.find('=');
  if (eq == std::string::npos)
    throw Error(where, ": expected key = value, got ", line, Hint("strings need double quotes: key = \"value\""));
  std::string key = trim(line.substr(0, eq));
  if (key.empty()) throw Error(where, ": missing key before '='");
  for (char ch : key)
    if (!(std::isalnum((unsigned char)ch) || ch == '_' || (dashes && ch == '-')))
      throw Error(where, ": bad key '", key, "'",
                  Hint(dashes ? "keys are letters, digits, '_' and '-'" : "keys are letters, digits and underscores"));
  try {
    return {key, parse_value(trim(line.substr(eq + 1)), false)};
  } catch (const Error& e) {
    throw Error(where, ": ", key, ": ", e.what());
  }
}

// Removes a # comment that is not inside a string.
std::string strip_comment(const std::string& line) {
  char q = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (q) {
      if (c == '\\' && q == '"') ++i;
      else if (c == q) q = 0;
    } else if (c == '"' || c == '\'') {
      q = c;
    } else if (c == '#') {
      return line.substr(0, i);
    }
  }
  return line;
}

void assign(PretrainConfig& c, const std::string& key, const Value& v, const std::string& where) {
  const KeyDef* k = find_key(key);
  if (!k) {
    std::string near = nearest_key(key);
    throw Error(where, ": unknown key '", key, "'",
                Hint(near.empty() ? "the keys are listed in configs/pretrain-tiny.toml" : "did you mean '" + near + "'?"));
  }
  std::string type = k->type;
  try {
    if (type == "string") as_string(*k, v);
    else if (type.find('|') != std::string::npos) as_choice(*k, v);
    k->set(c, v);
  } catch (const Error& e) {
    throw Error(where, ": ", e.what());
  }
  c.origin[key] = where;
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const char* precision_name(GemmPrecision p) {
  switch (p) {
    case GemmPrecision::bf16: return "bf16";
    case GemmPrecision::fp16: return "fp16";
    case GemmPrecision::tf32: return "tf32";
    case GemmPrecision::fp32: break;
  }
  return "fp32";
}

const char* data_sharding_name(DataSharding s) {
  return s == DataSharding::files ? "files" : s == DataSharding::local ? "local" : "batch";
}

const char* optimizer_name(OptimizerKind k) { return k == OptimizerKind::adamw ? "adamw" : "lamb"; }

const char* schedule_name(ScheduleConfig::Kind k) {
  switch (k) {
    case ScheduleConfig::Kind::poly: return "poly";
    case ScheduleConfig::Kind::cosine: return "cosine";
    case ScheduleConfig::Kind::linear: return "linear";
    case ScheduleConfig::Kind::constant: return "constant";
  }
  return "poly";
}

const std::vector<ConfigKeyInfo>& config_keys() {
  static const std::vector<ConfigKeyInfo> info = [] {
    std::vector<ConfigKeyInfo> out;
    for (const auto& k : keys()) out.push_back({k.name, k.type, k.help});
    return out;
  }();
  return info;
}

PretrainConfig parse_config(const std::string& text, const std::string& origin, int phase) {
  if (phase != 1 && phase != 2) throw Error("phase must be 1 or 2, got ", phase);
  PretrainConfig c;
  c.path = origin;
  c.phase = phase;
  // Two passes: the top level first, then [phase2] over it, so a key's position in the file
  // does not matter.
  struct Assignment {
    std::string key;
    Value value;
    std::string where;
  };
  std::vector<Assignment> top, phase2;
  std::set<std::string> seen_top, seen_phase2;
  std::string section;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string where = origin + ":" + std::to_string(line_no);
    std::string line = trim(strip_comment(raw));
    if (line.empty()) continue;
    if (line[0] == '[') {
      if (line.back() != ']') throw Error(where, ": a section header must end with ']', got ", line);
      section = trim(line.substr(1, line.size() - 2));
      if (section != "phase2")
        throw Error(where, ": unknown section [", section, "]",
                    Hint("the only section is [phase2] (keys overriding the top level for --phase 2)"));
      continue;
    }
    auto [key, v] = parse_assignment(line, where, false);
    if (!find_key(key)) assign(c, key, v, where);  // throws: unknown key, with a suggestion
    auto& seen = section.empty() ? seen_top : seen_phase2;
    if (!seen.insert(key).second)
      throw Error(where, ": '", key, "' is set twice", section.empty() ? "" : " in [phase2]",
                  Hint("remove one of the two assignments"));
    (section.empty() ? top : phase2).push_back({key, v, where});
  }
  for (const auto& a : top) assign(c, a.key, a.value, a.where);
  if (phase == 2) {
    for (const auto& a : phase2) assign(c, a.key, a.value, a.where);
  } else {
    // Check the [phase2] values too, so a typo there fails on phase 1 already.
    PretrainConfig scratch;
    for (const auto& a : phase2) assign(scratch, a.key, a.value, a.where);
  }
  return c;
}

std::vector<FlatSetting> parse_flat_config(const std::string& text, const std::string& origin) {
  std::vector<FlatSetting> out;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string where = origin + ":" + std::to_string(line_no);
    const std::string line = trim(strip_comment(raw));
    if (line.empty()) continue;
    if (line[0] == '[') throw Error(where, ": sections are not used here, got ", line, Hint("write key = value lines"));
    const auto [key, v] = parse_assignment(line, where, true);
    std::string dashed = key;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    if (!seen.insert(dashed).second) throw Error(where, ": '", key, "' is set twice", Hint("remove one of the two"));
    out.push_back({dashed, v.kind == Value::Kind::string ? v.s : v.text, where});
  }
  return out;
}

PretrainConfig load_config(const std::string& path, int phase) {
  if (!io::file_exists(path))
    throw Error("config file ", path, " not found", Hint("see configs/pretrain-tiny.toml for an example"));
  return parse_config(io::read_file(path), path, phase);
}

void apply_override(PretrainConfig& config, const std::string& assignment, const std::string& origin) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error(origin, " ", assignment, ": expected key=value", Hint("e.g. --set lr=1e-3"));
  std::string key = trim(assignment.substr(0, eq));
  Value v;
  try {
    v = parse_value(trim(assignment.substr(eq + 1)), true);
  } catch (const Error& e) {
    throw Error(origin, " ", key, ": ", e.what());
  }
  assign(config, key, v, origin + " " + key);
}

std::map<std::string, std::string> PretrainConfig::to_map() const {
  std::map<std::string, std::string> m;
  for (const auto& k : keys()) m[k.name] = k.get(*this);
  return m;
}

std::string PretrainConfig::to_toml() const {
  std::string out;
  for (const auto& k : keys()) out += std::string(k.name) + " = " + k.get(*this) + "\n";
  return out;
}

std::string PretrainConfig::numeric_hash() const {
  std::string text;
  for (const auto& k : keys())
    if (k.numeric) text += std::string(k.name) + "=" + k.get(*this) + '\xff';
  return fnv1a_hex(text);
}

std::string settings_hash(const std::map<std::string, std::string>& settings) {
  std::string text;
  for (const auto& [k, v] : settings) text += k + "=" + v + "\n";
  return fnv1a_hex(text);
}

std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

void PretrainConfig::validate() const {
  auto where = [&](const std::string& key) {
    auto it = origin.find(key);
    return it == origin.end() ? std::string(path.empty() ? "config" : path) : it->second;
  };
  if (data.empty()) throw Error(where("data"), ": the key 'data' (a shard directory) is required");
  if (output.empty()) throw Error(where("output"), ": the key 'output' (the run directory) is required",
                                  Hint("or pass --output DIR"));
  if (model.rfind("random:", 0) == 0) {
    random_model_config(model.substr(7), 30522);  // throws on an unknown size
    if (vocab.empty())
      throw Error(where("model"), ": model = \"", model, "\" needs 'vocab' (a vocab.txt) for its vocabulary size");
  }
  if (dynamic_masking && max_pred > max_seq) throw Error(where("max_pred"), ": max_pred ", max_pred, " exceeds max_seq ", max_seq);
  if (precision != GemmPrecision::fp32 && precision != GemmPrecision::bf16 && device != Device::cuda)
    throw Error(where("precision"), ": precision = \"", precision_name(precision),
                "\" needs device = \"cuda\" (the CPU GEMMs are fp32 or bf16)");
  if (precision == GemmPrecision::bf16 && device == Device::cpu)
    ops::require_cpu_bf16_unit(where("precision") + ": precision = \"bf16\"");
  if (activations == DType::bf16 && precision == GemmPrecision::fp16)
    throw Error(where("activations"), ": activations = \"bf16\" with precision = \"fp16\" mixes two 16-bit formats",
                Hint("use precision = \"bf16\" with bf16 activations"));
  if (precision == GemmPrecision::fp16 && !loss_scaling)
    throw Error(where("precision"), ": precision = \"fp16\" needs loss_scaling = \"dynamic\"",
                Hint("fp16 gradients underflow without it; DLE's fp16 runs start the scale at 2^20"));
#ifndef UNMASK_WITH_CUDA
  if (device == Device::cuda)
    throw Error(where("device"), ": device = \"cuda\" but this unmask was built without the CUDA backend",
                Hint("rebuild with -DUNMASK_CUDA=ON (needs the CUDA toolkit) on a machine with an NVIDIA GPU, or set "
                     "device = \"cpu\""));
#endif
}

BertConfig random_model_config(const std::string& size, int64_t vocab_size) {
  BertConfig c;
  auto set = [&](int64_t layers, int64_t hidden, int64_t heads) {
    c.num_hidden_layers = layers;
    c.hidden_size = hidden;
    c.num_attention_heads = heads;
    c.intermediate_size = 4 * hidden;
  };
  if (size == "tiny") set(2, 128, 2);
  else if (size == "mini") set(4, 256, 4);
  else if (size == "small") set(4, 512, 8);
  else if (size == "medium") set(8, 512, 8);
  else if (size == "base") c = BertConfig::base();
  else if (size == "large") c = BertConfig::large();
  else throw Error("unknown model size '", size, "'", Hint("random:tiny, random:mini, random:small, random:medium, random:base or random:large"));
  c.vocab_size = vocab_size;
  c.architectures = {"BertForPreTraining"};
  return c;
}

}  // namespace unmask::train
