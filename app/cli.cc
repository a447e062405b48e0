// app/cli.cc
#include "cli.h"

#include <sys/resource.h>

#include <algorithm>
#include <utility>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "io/file.h"
#include "train/config.h"
#include "train/metrics.h"
#include "ops/device_info.h"
#include "unmask/bert.h"
#include "unmask/error.h"

namespace unmask::cli {

std::string usage(const std::string& command, const std::string& summary, const std::vector<OptionSpec>& specs) {
  std::ostringstream os;
  os << "usage: unmask " << command << " [options]\n\n" << summary << "\n\noptions:\n";
  for (const auto& s : specs) {
    std::string left = "  --" + s.name + (s.value.empty() ? "" : " " + s.value);
    os << left;
    if (left.size() < 30) os << std::string(30 - left.size(), ' ');
    else os << "\n" << std::string(30, ' ');
    os << s.help;
    if (!s.fallback.empty()) os << " (default: " << s.fallback << ")";
    os << "\n";
  }
  os << "  --help                      show this help\n";
  return os.str();
}

std::optional<Args> Args::parse(const std::string& command, const std::string& summary,
                                const std::vector<OptionSpec>& specs, int argc, char** argv, int first) {
  Args a;
  a.command_ = command;
  for (const auto& s : specs)
    if (!s.fallback.empty()) a.defaults_[s.name] = s.fallback;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage(command, summary, specs).c_str(), stdout);
      return std::nullopt;
    }
    if (arg.rfind("--", 0) != 0)
      throw Error("unexpected argument '", arg, "'", Hint("options start with --; see unmask " + command + " --help"));
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto it = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == name; });
    if (it == specs.end()) {
      auto has = [&](const std::string& n) {
        return std::any_of(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == n; });
      };
      // The names Hugging Face's Trainer and NVIDIA DeepLearningExamples' scripts use.
      static const std::pair<const char*, std::vector<const char*>> kForeign[] = {
          {"learning_rate", {"lr"}},
          {"output_dir", {"output"}},
          {"max_steps", {"steps", "max-steps"}},
          {"num_train_epochs", {"epochs"}},
          {"gradient_accumulation_steps", {"accumulation"}},
          {"resume_from_checkpoint", {"resume"}},
          {"per_device_train_batch_size", {"batch"}},
          {"train_batch_size", {"batch"}},
          {"warmup_ratio", {"warmup"}},
          {"warmup_proportion", {"warmup"}},
          {"model_name_or_path", {"model", "init-from"}},
          {"init_checkpoint", {"init-from", "model"}},
          {"max_seq_length", {"seq", "max-seq"}},
          {"input_dir", {"data"}},
          {"train_file", {"data"}},
          {"validation_file", {"val"}},
          {"logging_steps", {"log-every"}},
          {"save_steps", {"checkpoint-every"}},
      };
      for (const auto& [foreign, ours] : kForeign)
        if (name == foreign)
          for (const char* o : ours)
            if (has(o))
              throw Error("unknown option --", name, Hint(std::string("unmask calls it --") + o + " (--" + name +
                                                          " is the Hugging Face / DLE name)"));
      // unmask's own earlier names of a concept that now has one name in every command.
      static const std::pair<const char*, const char*> kRenamed[] = {
          {"train", "data"}, {"dev", "val"}, {"model", "init-from"}};
      for (const auto& [old, now] : kRenamed)
        if (name == old && has(now))
          throw Error("unknown option --", name, Hint(std::string("it is --") + now + " now: one name per concept in "
                                                      "every command (--init-from, --data, --val, --output)"));
      std::string dashed = name;  // --weight_decay -> --weight-decay
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      if (dashed != name && has(dashed)) throw Error("unknown option --", name, Hint("did you mean --" + dashed + "?"));
      std::string best;
      size_t best_d = SIZE_MAX;
      for (const auto& s : specs) {  // a name the option begins (--out: --output) before the nearest by edits
        size_t d = train::edit_distance(name, s.name);
        if (name.size() >= 3 && s.name.rfind(name, 0) == 0) d = std::min<size_t>(d, 1);
        if (d < best_d) best_d = d, best = s.name;
      }
      throw Error("unknown option --", name,
                  Hint(best_d <= 3 ? "did you mean --" + best + "?" : "see unmask " + command + " --help"));
    }
    if (it->value.empty()) {
      if (inline_value) throw Error("--", name, " is a flag and takes no value");
      a.values_[name] = "1";
    } else {
      if (!inline_value) {
        if (i + 1 >= argc) throw Error("--", name, " needs a value (", it->value, ")");
        value = argv[++i];
      }
      a.values_[name] = value;
      a.all_values_[name].push_back(value);
    }
  }
  return a;
}

std::string Args::get(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto it = defaults_.find(name); it != defaults_.end()) return it->second;
  return "";
}

std::vector<OptionSpec> config_option_specs() {
  return {{"config", "FILE", "read options from FILE: key = value lines (keys: these options' names; # comments)", ""},
          {"set", "KEY=VALUE", "set one option (repeatable; over --config, under options given directly)", ""},
          {"print-config", "", "print every option with its value and help as a config file, then exit", ""}};
}

std::vector<std::string> expand_config_options(const std::vector<OptionSpec>& specs, int argc, char** argv, int first) {
  std::vector<std::string> head(argv, argv + first), rest;
  std::vector<train::FlatSetting> settings;
  std::vector<train::FlatSetting> sets;
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" || a.rfind("--config=", 0) == 0) {
      std::string path = a == "--config" ? (i + 1 < argc ? argv[++i] : "") : a.substr(9);
      if (path.empty()) throw Error("--config needs a file");
      if (!io::file_exists(path)) throw Error("config file ", path, " not found");
      for (auto& s : train::parse_flat_config(io::read_file(path), path)) settings.push_back(s);
    } else if (a == "--set" || a.rfind("--set=", 0) == 0) {
      const std::string kv = a == "--set" ? (i + 1 < argc ? argv[++i] : "") : a.substr(6);
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) throw Error("--set needs KEY=VALUE, got '", kv, "'");
      std::string key = kv.substr(0, eq);
      std::replace(key.begin(), key.end(), '_', '-');
      sets.push_back({key, kv.substr(eq + 1), "--set " + kv});
    } else {
      rest.push_back(a);
    }
  }
  settings.insert(settings.end(), sets.begin(), sets.end());
  std::vector<std::string> out = head;
  for (const train::FlatSetting& s : settings) {
    auto it = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& o) { return o.name == s.key; });
    if (it == specs.end() || s.key == "config" || s.key == "set" || s.key == "print-config") {
      std::string best;
      size_t best_d = SIZE_MAX;
      for (const auto& o : specs)
        if (size_t d = train::edit_distance(s.key, o.name); d < best_d) best_d = d, best = o.name;
      throw Error(s.where, ": unknown key '", s.key, "'",
                  Hint(best_d <= 3 ? "did you mean " + best + "?" : "the keys are the command's options (--help)"));
    }
    if (it->value.empty()) {  // a flag
      if (s.value != "true" && s.value != "false")
        throw Error(s.where, ": ", s.key, " is a switch: true or false, got '", s.value, "'");
      // a later false cancels an earlier true
      out.erase(std::remove(out.begin() + long(head.size()), out.end(), "--" + s.key), out.end());
      if (s.value == "true") out.push_back("--" + s.key);
    } else {
      out.push_back("--" + s.key);
      out.push_back(s.value);
    }
  }
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

std::string config_file_text(const Args& args, const std::vector<OptionSpec>& specs, const std::vector<std::string>& skip) {
  std::string out;
  for (const OptionSpec& o : specs) {
    if (o.name == "config" || o.name == "set" || o.name == "print-config" || o.name == "help") continue;
    if (std::find(skip.begin(), skip.end(), o.name) != skip.end()) continue;
    std::string key = o.name;
    std::replace(key.begin(), key.end(), '-', '_');
    std::string value = o.value.empty() ? (args.has(o.name) ? "true" : "false") : args.get(o.name);
    bool number = !value.empty();
    for (char c : value) number = number && (std::isdigit((unsigned char)c) || c == '.' || c == '-' || c == '+' || c == 'e');
    const bool bare = number || value == "true" || value == "false";
    // an option without a value (its default is decided later, e.g. by the task) stays unset
    out += "# " + o.help + "\n" + (value.empty() ? "# " : "") + key + " = " + (bare ? value : "\"" + value + "\"") + "\n";
  }
  return out;
}

std::optional<Args> parse_with_config(const std::string& command, const std::string& summary,
                                      const std::vector<OptionSpec>& specs, int argc, char** argv, int first,
                                      const std::vector<std::string>& not_in_config) {
  std::vector<OptionSpec> all_specs = specs;
  for (const OptionSpec& o : config_option_specs()) all_specs.push_back(o);
  std::vector<std::string> expanded = expand_config_options(all_specs, argc, argv, first);
  std::vector<char*> av;
  for (std::string& e : expanded) av.push_back(e.data());
  std::optional<Args> args = Args::parse(command, summary, all_specs, int(av.size()), av.data(), first);
  if (args && args->has("print-config")) {
    std::fputs(config_file_text(*args, specs, not_in_config).c_str(), stdout);
    return std::nullopt;
  }
  return args;
}

std::map<std::string, std::string> Args::values() const {
  std::map<std::string, std::string> all = defaults_;
  for (const auto& [k, v] : values_) all[k] = v.empty() ? "true" : v;
  return all;
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  if (auto it = all_values_.find(name); it != all_values_.end()) return it->second;
  return {};
}

std::string Args::require(const std::string& name) const {
  if (!has(name)) throw Error("--", name, " is required", Hint("see unmask " + command_ + " --help"));
  return get(name);
}

int64_t Args::get_int(const std::string& name) const {
  std::string v = get(name);
  try {
    size_t used = 0;
    long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw Error("--", name, " must be an integer, got '", v, "'");
  }
}

OptionSpec device_option() { return {"device", "cpu|cuda", "where the model runs (cuda: CUDA builds)", "cpu"}; }

OptionSpec cpu_precision_option() {
  return {"precision", "fp32|bf16",
          "bf16: the Linear layers' products in bf16 (fp32 accumulation) on the CPU's bf16 matrix unit (AMX or "
          "AVX-512 BF16: `unmask version`); everything else fp32", "fp32"};
}

void apply_cpu_precision(const Args& args, Context& ctx, BertModel& model) {
  const std::string p = args.get("precision");
  if (p != "fp32" && p != "bf16") throw Error("--precision must be fp32 or bf16, got '", p, "'");
  if (p == "bf16") model.to(ctx, inference_dtype(inference_precision_of(args, Device::cpu)));
}

Device device_of(const Args& args) {
  const std::string d = args.get("device");
  if (d != "cpu" && d != "cuda") throw Error("--device must be cpu or cuda, got '", d, "'");
#ifndef UNMASK_WITH_CUDA
  if (d == "cuda")
    throw Error("--device cuda: this unmask was built without the CUDA backend",
                Hint("rebuild with -DUNMASK_CUDA=ON (the CUDA toolkit) and run on a machine with an NVIDIA GPU"));
#endif
  return d == "cuda" ? Device::cuda : Device::cpu;
}

namespace {
// --precision: fp32, tf32, bf16 (and fp16 when allow_fp16), CUDA-only unless fp32 or (where
// cpu_bf16 and the CPU has a bf16 matrix unit) bf16; `hint` says what the CPU computes in.
std::string checked_precision(const Args& args, Device device, bool allow_fp16, bool cpu_bf16, const char* hint) {
  const std::string p = args.get("precision");
  if (p != "fp32" && p != "tf32" && p != "bf16" && !(allow_fp16 && p == "fp16"))
    throw Error("--precision must be ", allow_fp16 ? "fp32, tf32, bf16 or fp16" : "fp32, tf32 or bf16", ", got '", p,
                "'");
  if (device != Device::cuda && p == "bf16" && cpu_bf16) {
    ops::require_cpu_bf16_unit("--precision bf16");
    return p;
  }
  if (device != Device::cuda && p != "fp32") throw Error("--precision ", p, " needs --device cuda", Hint(hint));
  return p;
}
}  // namespace

std::string precision_of(const Args& args, Device device) {
  return checked_precision(args, device, false, true, "the CPU GEMMs are fp32 or bf16");
}

std::string training_precision_of(const Args& args, Device device) {
  return checked_precision(args, device, true, true, "the CPU GEMMs are fp32 or bf16");
}

std::string inference_precision_of(const Args& args, Device device) {
  return checked_precision(args, device, true, true, "the CPU kernels are fp32 or bf16");
}

DType inference_dtype(const std::string& precision) {
  return precision == "bf16" ? DType::bf16 : precision == "fp16" ? DType::f16 : DType::f32;
}

std::string setup_device(Context& ctx, const std::string& precision) {
  ops::set_training_precision(ctx, precision);
  return ops::device_description(ctx);
}

std::string attention_mode(Context& ctx) { return ops::training_attention(ctx); }

int gpu_for_local_rank(Device device, int local_rank) {
  const int n = device == Device::cuda ? ops::gpu_count() : 0;
  return n > 0 ? local_rank % n : 0;
}

GpuPeak gpu_peak(Context& ctx, const std::string& precision) {
  std::string name = ctx.device() == Device::cuda ? ops::gpu_name(ctx) : "no CUDA device";
  struct Peaks {
    const char* match;  // a substring of the device name; the first match wins
    const char* family;
    double fp32, tf32, half;
  };
  static const Peaks kTable[] = {
      {"H100 NVL", "H100 NVL", 60000.0, 417500.0, 835500.0},
      {"H100 PCIe", "H100 PCIe", 51200.0, 378000.0, 756000.0},
      {"H100", "H100/H200 SXM", 67000.0, 494700.0, 989400.0},
      {"H200", "H100/H200 SXM", 67000.0, 494700.0, 989400.0},
      {"H800", "H800 SXM", 67000.0, 494700.0, 989400.0},
      {"A100", "A100", 19500.0, 156000.0, 312000.0},
  };
  const Peaks* hit = nullptr;
  for (const Peaks& p : kTable)
    if (name.find(p.match) != std::string::npos) {
      hit = &p;
      break;
    }
  const Peaks& p = hit ? *hit : kTable[2];
  GpuPeak out;
  out.gflops = precision == "bf16" || precision == "fp16" ? p.half : precision == "tf32" ? p.tf32 : p.fp32;
  out.label = hit ? " (" + name + ": " + p.family + " dense datasheet)"
                  : " (" + name + ": unknown to unmask, the H100 SXM dense datasheet assumed; give --peak-gflops)";
  return out;
}

double gpu_matmul_peak(Context& ctx, const std::string& precision) {
  if (ctx.device() != Device::cuda) return 0.0;
  static std::map<std::string, double> measured;  // per precision; one GPU per process
  auto it = measured.find(precision);
  if (it != measured.end()) return it->second;
  const DType dt = precision == "bf16" ? DType::bf16 : precision == "fp16" ? DType::f16 : DType::f32;
  const double gflops = train::measure_matmul_peak_gflops(ctx, dt);
  measured[precision] = gflops;
  return gflops;
}

double training_peak_gflops(Context& ctx, const std::string& precision) {
  if (ctx.device() == Device::cuda) return gpu_matmul_peak(ctx, precision);
  return precision == "bf16" ? train::measure_bf16_peak_gflops(ctx.num_threads())
                             : train::measure_peak_gflops(ctx.num_threads());
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

double peak_gpu_mb(const Context& ctx) { return ops::device_memory_peaks(ctx).allocated_mb; }

GpuMemoryPeaks gpu_memory_peaks(const Context& ctx) {
  const ops::DeviceMemoryPeaks p = ops::device_memory_peaks(ctx);
  GpuMemoryPeaks m;
  m.requested_mb = p.requested_mb, m.reserved_mb = p.reserved_mb;
  return m;
}

void reset_peak_gpu(const Context& ctx) { ops::reset_device_memory_peaks(ctx); }

double Args::get_double(const std::string& name) const {
  std::string v = get(name);
  try {
    size_t used = 0;
    const double x = std::stod(v, &used);
    if (used != v.size() || !std::isfinite(x)) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw Error("--", name, " must be a number, got '", v, "' (a finite number, e.g. 0.5)");
  }
}

std::vector<int64_t> Args::get_int_list(const std::string& name) const {
  std::vector<int64_t> out;
  std::string v = get(name);
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long long x = std::stoll(item, &used);
      if (used != item.size() || x <= 0) throw std::invalid_argument(item);
      out.push_back(x);
    } catch (const std::exception&) {
      throw Error("--", name, " must be a comma-separated list of positive integers, got '", v, "'");
    }
  }
  if (out.empty()) throw Error("--", name, " is empty");
  return out;
}

}  // namespace unmask::cli
