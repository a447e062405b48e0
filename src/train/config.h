// train/config.h: the pretraining run's configuration, read from a small TOML subset.
//
//   train::PretrainConfig c = train::load_config("configs/pretrain-tiny.toml", /*phase=*/1);
//   train::apply_override(c, "lr=1e-3", "--set");      // command-line `--set key=value`
//   c.validate();                                      // cross-key checks (data, output, sizes)
//
// The format (a subset of TOML, parsed here; no dependency):
//   # a comment                         (also after a value)
//   key = "string"                      (\" \\ \n \t escapes; single quotes: literal)
//   key = 123 | 1.5e-3 | 1_000          (numbers; underscores between digits)
//   key = true | false
//   [phase2]                            (keys below override the top-level ones when phase 2
//                                        is selected: DLE's second phase, seq 512 / max_pred 80)
// Every key is listed in kConfigKeys (config.cc) with its type and its help text; an unknown
// key is an error naming the nearest valid key; a wrong type or value is an error naming the
// file and line. configs/pretrain-tiny.toml documents every key.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "unmask/train.h"

namespace unmask::train {

/// How the ranks of a data-parallel run (mpirun / srun) split the data (V-SWIFT's modes + DLE's):
///   batch: every rank reads the same files and the same global batches and keeps its contiguous
///          rows, so N ranks x B compute exactly 1 rank x N*B (any rank count resumes any run);
///   files: mode 1, every machine holds the dataset: each epoch shuffles the shard list (the same
///          order on every rank) and rank r reads only its shards r, r+N, r+2N, ... of it (DLE's
///          run_pretraining): disjoint within an epoch, other shards the next;
///   local: mode 2, each machine holds only its part: `data` is this machine's directory ("{rank}"
///          in it is replaced by the rank; without it the host's shards are dealt to its ranks),
///          counts may differ; every rank draws `batch` rows per step from its own data, so a rank
///          with fewer instances revisits them more often (V-SWIFT's resample-to-equal).
enum class DataSharding : uint8_t { batch, files, local };
const char* data_sharding_name(DataSharding s);

/// The GEMMs' precision (config key precision): fp32; on CUDA also tf32 (TF32 tensor cores) or
/// bf16 (operands rounded to bf16, fp32 accumulation, fp32 master weights and activations).
enum class GemmPrecision : uint8_t { fp32, tf32, bf16, fp16 };
const char* precision_name(GemmPrecision p);

struct PretrainConfig {
  // -- what to train, on what, where
  std::string model = "random:tiny";  // HF dir to start from, or "random:tiny|mini|small|medium|base|large"
  std::string vocab;                  // vocab.txt (default: <model>/vocab.txt for an HF dir)
  std::string data;                   // shard directory (or one shard file)
  std::string output;                 // run directory: checkpoints/, metrics.jsonl, loss.svg
  std::string init_checkpoint;        // phase 2: weights (+ optimizer moments) from here, step reset to 0
  // -- optimizer
  OptimizerKind optimizer = OptimizerKind::lamb;
  double lr = 6e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-6, weight_decay = 0.01, max_grad_norm = 1.0;
  // -- schedule
  ScheduleConfig::Kind schedule = ScheduleConfig::Kind::poly;
  double warmup = 0.2843;             // fraction of steps
  double poly_degree = 0.5;
  int64_t steps = 1000;               // total optimizer steps
  // -- batches
  int64_t batch = 8;                  // micro-batch (sequences per forward/backward)
  int64_t accumulation = 1;           // micro-batches per optimizer step
  int64_t max_seq = 128, max_pred = 20;  // checked against the shards
  bool dynamic_masking = false;
  double masked_lm_prob = 0.15;       // dynamic masking only
  bool prefetch = true;
  bool overlap_allreduce = true;  // data parallel: all-reduce buckets as the backward finishes them
  DataSharding data_sharding = DataSharding::batch;  // data parallel: who reads what (above)
  Device device = Device::cpu;        // cuda: CUDA builds; rank r of a host uses GPU local_rank % GPUs
  GemmPrecision precision = GemmPrecision::fp32;  // tf32 / bf16 / fp16: tensor-core GEMMs (device = "cuda")
  DType activations = DType::f32;     // the encoder layers' activations (TrainStepOptions::activations)
  bool loss_scaling = false;          // dynamic loss scaling (train/loss_scaler.h): fp16's guard
  double init_loss_scale = 1048576.0; // 2^20, DLE's
  int64_t loss_scale_window = 2000;   // finite steps before the scale doubles
  uint64_t seed = 42;
  // -- regularisation
  double hidden_dropout = 0.1, attention_dropout = 0.1;
  // -- machine, logging, checkpoints
  int threads = 0;                    // 0 = all cores
  int64_t checkpoint_every = 200;     // optimizer steps (0 = only at the end)
  int64_t keep_checkpoints = 3;       // keep the last N (0 = keep all)
  int64_t log_every = 10;             // plain progress lines (not a terminal) every N steps
  double peak_gflops = 0;             // fp32 peak for MFU (0 = measure with an FMA loop)

  /// Cross-key checks (required keys present, sizes positive, fractions in range); errors name
  /// the key and its origin (file:line or --set) when known.
  void validate() const;
  /// Every key = value in the canonical (file) syntax, in kConfigKeys order.
  std::string to_toml() const;
  /// key -> canonical value text (for trainer_state.json and resume diffs).
  std::map<std::string, std::string> to_map() const;
  /// FNV-1a of the keys that change the numbers of the run (not output, threads, logging).
  std::string numeric_hash() const;

  /// Where each key was last set ("configs/x.toml:12", "--set"); empty = default.
  std::map<std::string, std::string> origin;
  std::string path;  // the config file (empty when built in code)
  int phase = 1;
};

/// Parses a config file. phase 2 applies the [phase2] section over the top-level keys.
PretrainConfig load_config(const std::string& path, int phase = 1);
/// Parses config text (`origin` names it in errors, as the file name would).
PretrainConfig parse_config(const std::string& text, const std::string& origin, int phase = 1);
/// Applies "key=value" (the value in file syntax, or a bare string) naming `origin` in errors.
void apply_override(PretrainConfig& config, const std::string& assignment, const std::string& origin);

/// Key names and help, in documentation order (for --help and the example configs).
struct ConfigKeyInfo {
  const char* name;
  const char* type;  // "string", "int", "float", "bool", or "a|b|c"
  const char* help;
};
const std::vector<ConfigKeyInfo>& config_keys();

/// A flat config file (the same TOML subset: `key = value` lines, # comments, no sections) as
/// (key, value text, "file:line") in file order: strings unquoted, numbers and true / false as
/// written. Keys are letters, digits, '_' and '-'; a key set twice or a malformed line is an
/// Error naming the line. What the keys mean is the caller's (the video commands' options).
struct FlatSetting {
  std::string key, value, where;
};
std::vector<FlatSetting> parse_flat_config(const std::string& text, const std::string& origin);

/// FNV-1a (64 bits) of `text` as 16 hex digits: the settings hash a checkpoint records.
std::string fnv1a_hex(const std::string& text);

/// The hash a checkpoint records of a run's settings (key=value lines in key order): fnv1a_hex.
std::string settings_hash(const std::map<std::string, std::string>& settings);

/// Levenshtein distance (insert, delete, substitute; all cost 1).
size_t edit_distance(const std::string& a, const std::string& b);

/// Parses a model spec's size ("random:base" -> BertConfig::base() with the given vocab size).
/// Sizes: tiny (2 x 128, 2 heads), mini (4 x 256, 4), small (4 x 512, 8), medium (8 x 512, 8), base, large.
BertConfig random_model_config(const std::string& size, int64_t vocab_size);

const char* optimizer_name(OptimizerKind k);
const char* schedule_name(ScheduleConfig::Kind k);

}  // namespace unmask::train
