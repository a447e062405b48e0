// app/cli.h: a small command-line parser shared by the subcommands.
//
// Every command declares its options (name, value or flag, help); `--help` prints them; an
// unknown option is an error that names the nearest valid one.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "unmask/context.h"
#include "unmask/dtype.h"
#include "unmask/device.h"

namespace unmask {
class BertModel;
}  // namespace unmask

namespace unmask::cli {

struct OptionSpec {
  std::string name;      // without the leading "--"
  std::string value;     // placeholder for the value ("DIR"); empty = a flag
  std::string help;
  std::string fallback;  // default shown in --help (and returned by get)
};

class Args {
 public:
  /// Parses argv[first..]; returns nullopt after printing help when --help was given.
  static std::optional<Args> parse(const std::string& command, const std::string& summary,
                                   const std::vector<OptionSpec>& specs, int argc, char** argv, int first);
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string get(const std::string& name) const;  // the value or the spec's default
  std::string require(const std::string& name) const;  // error if absent
  int64_t get_int(const std::string& name) const;
  double get_double(const std::string& name) const;  // finite, whole value parsed, else an Error naming --name
  std::vector<int64_t> get_int_list(const std::string& name) const;  // "1,2,4"
  /// Every value an option was given, in order (an option may repeat; get() returns the last).
  std::vector<std::string> get_all(const std::string& name) const;
  /// Every option's effective value (given, else its default; a given flag as "true").
  std::map<std::string, std::string> values() const;

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_values_;
  std::map<std::string, std::string> defaults_;
};

std::string usage(const std::string& command, const std::string& summary, const std::vector<OptionSpec>& specs);

/// The options a command takes from a config file: --config FILE (key = value lines, the keys
/// the command's option names with '_' or '-'), --set KEY=VALUE (repeatable) and --print-config.
std::vector<OptionSpec> config_option_specs();
/// Takes --config and --set out of argv[first..] and puts the options they set in front of the
/// remaining ones (a flag set true is given, false left out), so that an option on the command
/// line wins over --set, and --set over the file. An unknown key or a value for a flag other
/// than true / false is an Error naming its file:line (or --set). Returns argv[0..first) and
/// the expanded options.
std::vector<std::string> expand_config_options(const std::vector<OptionSpec>& specs, int argc, char** argv, int first);
/// Args::parse of a command that takes a config file: --config / --set expanded
/// (expand_config_options) and --print-config answered (config_file_text, leaving out the options
/// in `not_in_config`). Returns nullopt after printing --help or the config.
std::optional<Args> parse_with_config(const std::string& command, const std::string& summary,
                                      const std::vector<OptionSpec>& specs, int argc, char** argv, int first,
                                      const std::vector<std::string>& not_in_config);
/// A config file of every option of `specs` with its value in `args` and its help as a comment
/// (--print-config: the file to start a run's config from); options named in `skip` are left out.
std::string config_file_text(const Args& args, const std::vector<OptionSpec>& specs, const std::vector<std::string>& skip);
/// The shared `--device cpu|cuda` option, and its value: an Error for another value, and for
/// cuda in a build without the CUDA backend (saying how to get one).
OptionSpec device_option();
/// --precision fp32|bf16 for the CPU-only inference commands (embed, predict).
OptionSpec cpu_precision_option();
/// Applies --precision (cpu_precision_option) to a loaded model: bf16 packs the Linear layers'
/// weights as bf16 at the first forward; refused with a clear error on a CPU without a bf16 unit.
void apply_cpu_precision(const Args& args, Context& ctx, BertModel& model);
Device device_of(const Args& args);
/// `--precision fp32|tf32|bf16` checked against the device (tf32 and bf16 are CUDA tensor-core
/// modes; the CPU is fp32). Returns the value.
std::string precision_of(const Args& args, Device device);
/// The same with fp16 allowed (CUDA: fp16 GEMM operands, fp32 accumulation and master weights),
/// for a training command whose loop scales the loss (--loss-scaling dynamic).
std::string training_precision_of(const Args& args, Device device);
/// `--precision fp32|tf32|bf16|fp16` of an inference command, checked against the device
/// (everything but fp32 needs CUDA): tf32 runs the f32 weights' GEMMs on TF32 tensor cores; bf16
/// and fp16 convert the weights (and so the activations) to that type. Returns the value.
std::string inference_precision_of(const Args& args, Device device);
/// The weights' dtype of an inference precision (fp32 and tf32: f32).
DType inference_dtype(const std::string& precision);
/// Applies a precision to a CUDA context (CudaState::allow_tf32 / autocast) before its first
/// GEMM, and returns the devices column "1x <GPU name>" (CPU: "CPU (<n> threads)").
std::string setup_device(Context& ctx, const std::string& precision);
/// Which training attention a context runs: "cpu", "f32" (CUDA cores) or "bf16-tc" (tensor cores,
/// CudaState::attention_bf16: on with bf16 GEMMs).
std::string attention_mode(Context& ctx);
/// The GPU a process of a host uses: local_rank % visible GPUs (0 on the CPU or without a GPU).
int gpu_for_local_rank(Device device, int local_rank);
/// A GPU's dense datasheet peak (GFLOP/s) of a precision's units, for MFU on CUDA, and what the
/// table's header says of it.
struct GpuPeak {
  double gflops = 0;
  std::string label;  // e.g. " (NVIDIA H200: H100/H200 SXM dense datasheet)"
};
/// By the context's device name: H100 SXM, H200 and H800 (fp32 CUDA cores 67,000, TF32 494,700,
/// bf16 / fp16 989,400), H100 NVL (60,000 / 417,500 / 835,500), H100 PCIe (51,200 / 378,000 /
/// 756,000), A100 (19,500 / 156,000 / 312,000); another GPU gets the H100 SXM figures and a label
/// saying they were assumed (give --peak-gflops).
GpuPeak gpu_peak(Context& ctx, const std::string& precision);
/// The GEMM rate this GPU measurably reaches in the precision's operands (bf16 / fp16; tf32 and
/// fp32: f32 operands under the context's TF32 setting), in GFLOP/s: issue 6's MFU denominator,
/// train::measure_matmul_peak_gflops at 8192^3, measured once per process and precision (~0.5 s,
/// most of it filling the operands on the host). 0 on the CPU.
double gpu_matmul_peak(Context& ctx, const std::string& precision);
/// A training run's MFU denominator in GFLOP/s: on CUDA gpu_matmul_peak; on the CPU the measured
/// peak of the unit the GEMMs use (the bf16 dot-product loop for --precision bf16, else the FMA loop).
double training_peak_gflops(Context& ctx, const std::string& precision);
/// Seconds on the steady clock (benchmark timing).
double now_s();
/// The process's peak resident set size in MiB (getrusage).
double peak_rss_mb();
/// The CUDA caching allocator's high-water mark in MiB (0 for a CPU context or build).
double peak_gpu_mb(const Context& ctx);
/// The allocator's other high-water marks in MiB: bytes as requested (comparable with PyTorch's
/// max_memory_allocated; peak_gpu_mb counts size-class-rounded blocks, up to 25% more) and bytes
/// obtained from cudaMalloc (comparable with max_memory_reserved: what the process held).
struct GpuMemoryPeaks {
  double requested_mb = 0, reserved_mb = 0;
};
GpuMemoryPeaks gpu_memory_peaks(const Context& ctx);
/// Resets that high-water mark to the memory allocated now (a benchmark row's own peak).
void reset_peak_gpu(const Context& ctx);

int cmd_infer(int argc, char** argv);
int cmd_forward(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_prepare_text(int argc, char** argv);   // app/cmd_prepare_text.cc
int cmd_train_vocab(int argc, char** argv);    // app/cmd_prepare_text.cc
int cmd_predict(int argc, char** argv);        // app/cmd_finetune.cc
int cmd_embed(int argc, char** argv);          // app/cmd_infer.cc
int cmd_pretrain(int argc, char** argv);       // app/cmd_pretrain.cc
int cmd_train_step(int argc, char** argv);     // app/cmd_train_step.cc (gradient dumps for parity checks)
int cmd_finetune(int argc, char** argv);       // app/cmd_finetune.cc
int cmd_eval(int argc, char** argv);           // app/cmd_finetune.cc
int bench_train(int argc, char** argv);        // app/cmd_bench_train.cc (`unmask bench train`)
int bench_videomae(int argc, char** argv);     // app/cmd_bench_videomae.cc (`unmask bench videomae`)
int cmd_make_videos(int argc, char** argv);    // app/cmd_make_videos.cc
int cmd_bevt_step(int argc, char** argv);      // app/cmd_bevt_step.cc (BEVT parity dumps)
int cmd_pretrain_bevt(int argc, char** argv);  // app/cmd_bevt_train.cc
int cmd_finetune_swin(int argc, char** argv);  // app/cmd_bevt_train.cc
int cmd_videomae_step(int argc, char** argv);  // app/cmd_videomae_step.cc (VideoMAE parity dumps)
int cmd_convert_videomae(int argc, char** argv);  // app/cmd_convert_video.cc (VideoMAE checkpoints orig <-> HF)
int cmd_pretrain_video(int argc, char** argv);  // app/cmd_video_train.cc (VideoMAE pretraining)
int cmd_finetune_video(int argc, char** argv);  // app/cmd_video_train.cc (classification + held-out eval)
int cmd_eval_video(int argc, char** argv);      // app/cmd_video_train.cc (multi-view top-1 / top-5)
int cmd_prepare_video(int argc, char** argv);  // app/cmd_prepare_video.cc (decode-once clip store)
int bench_loader(int argc, char** argv);       // app/cmd_bench_loader.cc (`unmask bench loader`)
int bench_bevt(int argc, char** argv);         // app/cmd_bench_bevt.cc (`unmask bench bevt`, FAMBench's BEVT)
int bench_scaling(int argc, char** argv);      // app/cmd_bench_scaling.cc (`unmask bench scaling`, BEVT's table)
int cmd_dist_check(int argc, char** argv);     // app/cmd_dist_check.cc (data-parallel launch check)

}  // namespace unmask::cli
