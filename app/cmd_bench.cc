// app/cmd_bench.cc: `unmask bench infer`, the AITemplate BERT table (batch, seq, latency, QPS)
// plus achieved GFLOP/s and % of peak (CPU: its measured fp32 peak; CUDA: the H100's dense
// rate of the precision's units). On CUDA: --precision bf16|fp16 (weights and activations),
// tf32 or fp32, and --cuda-graph on (each shape's forward replayed as one graph).
//
// FLOPs are counted analytically (matrix products only; element-wise work is < 1%):
//   per layer, per token:  2 C (3C + C + 2I)          QKV, output projection, FFN in/out
//   per layer, per seq:    4 C len^2                   Q K^T and P V over all heads
//   pooler:                2 C^2 per sequence          (not with --encoders-only)

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench_profile.h"
#include "cli.h"
#include "ops/device_info.h"
#include "train/metrics.h"
#include "unmask/bert.h"
#include "unmask/context.h"
#include "unmask/error.h"


namespace unmask::cli {

namespace {

// A peer engine's rows for the side-by-side table (seed 003's "PT Latency | PT QPS | AIT
// Latency | AIT QPS" columns): JSON lines with batch, seq and latency_ms, as the peers write
// them (bench/peers/torch_bench.py, bench/gpu/torch_bert_infer.py; "engine" / "impl" name
// them). Rows with an "error" are skipped; of several rows for one shape the fastest is kept
// (e.g. the best of PyTorch eager and torch.compile), and its name shows in the JSON output.
struct PeerRow {
  double latency_ms = 0;  // 0: the peer has no timing for the shape, only `error`
  std::string name;
  std::string error;  // the peer's error for the shape (e.g. "OOM"), when it has no timing
};

/// What the seed's tables print for a shape that failed: "OOM" for an out-of-memory, else "error".
const char* failure_word(const std::string& error) {
  return error.find("OOM") != std::string::npos || error.find("out of memory") != std::string::npos ? "OOM" : "error";
}

/// A shape's peer latency and QPS cells in seed 003's table: its numbers, "OOM" / "error" when
/// the peer has only an error for the shape, "-" when it has no row.
std::pair<std::string, std::string> peer_cells(const PeerRow* pr, int64_t batch) {
  if (!pr) return {"-", "-"};
  if (pr->latency_ms == 0) return {failure_word(pr->error), failure_word(pr->error)};
  char lat[32], qps[32];
  std::snprintf(lat, sizeof lat, "%.2f", pr->latency_ms);
  std::snprintf(qps, sizeof qps, "%.2f", double(batch) / (pr->latency_ms * 1e-3));
  return {lat, qps};
}
using PeerRows = std::map<std::pair<int64_t, int64_t>, PeerRow>;  // (batch, seq)

PeerRows read_peer_rows(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw Error("--peer: cannot open ", file, Hint("give the JSON-lines file a peer benchmark wrote"));
  PeerRows rows;
  std::string line;
  for (int64_t no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[line.find_first_not_of(" \t")] != '{')
      continue;  // blank lines and the peers' plain-text progress lines
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw Error("--peer ", file, ":", no, ": not JSON (", e.what(), ")");
    }
    if (j.contains("error")) {  // kept for the table's "OOM" cell unless the shape also has a timing
      if (j.contains("batch") && j["batch"].is_number() && j.contains("seq") && j["seq"].is_number()) {
        PeerRow& r = rows[{j["batch"].get<int64_t>(), j["seq"].get<int64_t>()}];
        if (r.latency_ms == 0 && r.error.empty()) r.error = j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump();
      }
      continue;
    }
    for (const char* key : {"batch", "seq", "latency_ms"})
      if (!j.contains(key) || !j[key].is_number())
        throw Error("--peer ", file, ":", no, ": a row needs numeric batch, seq and latency_ms, got ", line.substr(0, 120));
    const double ms = j["latency_ms"].get<double>();
    if (!(ms > 0) || !std::isfinite(ms)) throw Error("--peer ", file, ":", no, ": latency_ms must be > 0, got ", ms);
    const std::string name = j.value("impl", j.value("engine", std::string("peer")));
    PeerRow& r = rows[{j["batch"].get<int64_t>(), j["seq"].get<int64_t>()}];
    if (r.latency_ms == 0 || ms < r.latency_ms) r = {ms, name, ""};
  }
  if (std::none_of(rows.begin(), rows.end(), [](const auto& kv) { return kv.second.latency_ms > 0; })) throw Error("--peer ", file, ": no benchmark rows", Hint("run the peer benchmark with JSON output first"));
  return rows;
}

struct Row {
  int64_t batch, seq, tokens;
  double latency_ms, qps, gflops, pct_peak, rss_mb;
};

double forward_flops(const BertConfig& c, const std::vector<int32_t>& lengths, bool encoders_only) {
  const double C = double(c.hidden_size), I = double(c.intermediate_size), L = double(c.num_hidden_layers);
  double tokens = 0, sq = 0;
  for (int32_t len : lengths) tokens += len, sq += double(len) * len;
  double f = L * (tokens * 2 * C * (4 * C + 2 * I) + 4 * C * sq);
  if (!encoders_only) f += double(lengths.size()) * 2 * C * C;
  return f;
}

int bench_infer(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"model", "DIR|bert-base|bert-large", "a HF model directory, or random weights of that size", "bert-base"},
      {"batch", "LIST", "batch sizes, e.g. 1,2,4,8", "1"},
      {"seq", "LIST", "sequence lengths (with --lengths: the maximum)", "128"},
      {"activation", "gelu|fast_gelu", "feed-forward activation (fast_gelu = tanh approximation)", "gelu"},
      {"encoders-only", "", "time the encoder layers only (input = hidden states), as AITemplate's table", ""},
      {"lengths", "uniform:MIN:MAX", "mixed-length batches run packed (no compute on padding); seq column = MAX", ""},
      {"threads", "N", "CPU threads (0 = all cores)", "0"},
      device_option(),
      {"precision", "fp32|tf32|bf16|fp16", "CUDA: bf16/fp16 weights and activations (fp32 math inside), or TF32 GEMMs; CPU: bf16 Linear products on a bf16 matrix unit", "fp32"},
      {"cuda-graph", "on|off", "CUDA: replay each shape's forward as one CUDA graph", "on"},
      {"iters", "N", "minimum timed iterations per row", "10"},
      {"min-time", "SEC", "keep iterating until this much time has passed per row", "2"},
      {"warmup", "N", "untimed iterations per row (at least 1)", "2"},
      {"seed", "N", "seed for weights and token ids", "1234"},
      {"lengths-seed", "N", "seed of the --lengths draw (the peers' LCG: same lengths as ORT/PyTorch runs with --seed N)", "0"},
      {"peak-gflops", "X", "peak for %-of-peak (default: CPU the fp32 FMA peak measured with an FMA loop; CUDA the GPU's dense datasheet peak of --precision)", ""},
      {"format", "table|json|csv", "output format (json: one object per row)", "table"},
      {"profile", "N", "after each row, N more forward calls with every op timed (eager: a graph replay runs no op "
                       "front-end): the time per op and call (table: after the row; json: the row's \"profile\")", "0"},
      {"profile-shapes", "", "with --profile: one row per GEMM shape and epilogue instead of one \"gemm\" row", ""},
      {"peer", "FILE", "a peer's JSON rows (batch, seq, latency_ms): the table becomes seed 003's side by side, per seq", ""},
      {"peer-label", "NAME", "the peer's column label", "PT"},
  };
  auto args = Args::parse("bench infer", "BERT inference benchmark: batch, seq, median latency, QPS, GFLOP/s, % of peak.",
                          specs, argc, argv, 3);
  if (!args) return 0;
  const std::string format = args->get("format");
  if (format != "table" && format != "json" && format != "csv") throw Error("--format must be table, json or csv, got '", format, "'");
  const std::string act = args->get("activation");
  if (act != "gelu" && act != "fast_gelu") throw Error("--activation must be gelu or fast_gelu, got '", act, "'");
  const auto batches = args->get_int_list("batch");
  const auto seqs = args->get_int_list("seq");
  const int64_t min_iters = std::max<int64_t>(1, args->get_int("iters"));
  const int64_t profile = args->get_int("profile");
  if (profile < 0) throw Error("--profile must be >= 0, got ", profile);
  // At least one untimed forward: the first one packs the weights for the GEMM and builds the
  // GEMM primitives for the shape, which would otherwise be timed.
  const int64_t warmup = std::max<int64_t>(1, args->get_int("warmup"));
  const double min_time = args->get_double("min-time");
  const uint64_t seed = uint64_t(args->get_int("seed"));
  const bool encoders_only = args->has("encoders-only");
  int64_t len_min = 0, len_max = 0;
  if (args->has("lengths")) {
    std::string spec = args->get("lengths");
    if (std::sscanf(spec.c_str(), "uniform:%ld:%ld", &len_min, &len_max) != 2 || len_min < 1 || len_max < len_min)
      throw Error("--lengths must be uniform:MIN:MAX with 1 <= MIN <= MAX, got '", spec, "'");
  }

  const Device device = device_of(*args);
  const std::string precision = inference_precision_of(*args, device);
  const std::string graph_arg = args->get("cuda-graph");
  if (graph_arg != "on" && graph_arg != "off") throw Error("--cuda-graph must be on or off, got '", graph_arg, "'");
  const bool cuda_graph = device == Device::cuda && graph_arg == "on";
  Context ctx({.num_threads = int(args->get_int("threads")), .device = device});
  const std::string devices = setup_device(ctx, precision);
  const std::string model_arg = args->get("model");
  // Random weights get as many positions as the longest --seq asks for (seed 003 runs
  // BERT-base shapes up to 4096 tokens; a checkpoint keeps its own limit).
  int64_t longest = 0;
  for (int64_t s : seqs) longest = std::max(longest, s);
  auto random_config = [&](BertConfig c) {
    c.max_position_embeddings = std::max(c.max_position_embeddings, longest);
    return c;
  };
  BertModel model = model_arg == "bert-base"    ? BertModel::random(random_config(BertConfig::base()), BertHeads{.pooler = true}, seed)
                    : model_arg == "bert-large" ? BertModel::random(random_config(BertConfig::large()), BertHeads{.pooler = true}, seed)
                                                : BertModel::load(model_arg);
  model.set_hidden_act(act == "gelu" ? HiddenAct::gelu : HiddenAct::gelu_tanh);
  model.to(ctx, inference_dtype(precision));  // CPU bf16: Linear products in bf16
  const BertConfig& cfg = model.config();
  // CUDA: the GPU's dense datasheet rate of the precision's units (gpu_peak) unless --peak-gflops says otherwise.
  // CPU bf16: the AVX-512 BF16 dot-product peak (on an AMX machine the figure says so).
  const bool cpu_bf16 = device == Device::cpu && precision == "bf16";
  const double peak = args->has("peak-gflops")   ? args->get_double("peak-gflops")
                      : device == Device::cuda ? gpu_peak(ctx, precision).gflops
                      : cpu_bf16               ? train::measure_bf16_peak_gflops(ctx.num_threads())
                                               : train::measure_peak_gflops(ctx.num_threads());
  const std::string bf16_unit = ops::cpu_bf16_unit();
  const std::string cpu_unit = cpu_bf16 ? " kernels, bf16 products on " + bf16_unit +
                                              (bf16_unit == "amx" ? "; peak: AVX-512 BF16's" : "")
                                        : " kernels";

  const PeerRows peer = args->has("peer") ? read_peer_rows(args->get("peer")) : PeerRows{};
  const std::string peer_label = args->get("peer-label");
  if (format == "table") {
    std::printf("# unmask bench infer: %s, %lld layers, hidden %lld, %s, %s, %s%s, peak %.0f GFLOP/s%s%s\n",
                model_arg.c_str(), (long long)cfg.num_hidden_layers, (long long)cfg.hidden_size, act.c_str(),
                devices.c_str(), precision.c_str(),
                device == Device::cuda ? (cuda_graph ? ", CUDA graphs" : ", eager") : (std::string(" (") + ctx.cpu_isa() + cpu_unit + ")").c_str(),
                peak, encoders_only ? ", encoders only" : "",
                len_max ? (", lengths uniform " + std::to_string(len_min) + ".." + std::to_string(len_max)).c_str() : "");
    if (peer.empty()) {
      std::printf("| Batch size | Seq len | Latency (ms) | QPS (seq/s) | GFLOP/s | %% of peak |\n");
      std::printf("|-----------:|--------:|-------------:|------------:|--------:|----------:|\n");
    } else {
      std::string names;  // the peer rows' engines, each once
      for (const auto& [shape, row] : peer)
        if (row.latency_ms > 0 && names.find(row.name) == std::string::npos) names += (names.empty() ? "" : ", ") + row.name;
      std::printf("# peer: %s (%s; the fastest of them per shape); speedup = %s latency / unmask latency\n",
                  args->get("peer").c_str(), names.c_str(), peer_label.c_str());
    }
  } else if (format == "csv") {
    std::printf("batch,seq,latency_ms,qps,gflop_per_s,pct_of_peak,tokens,threads%s\n",
                peer.empty() ? "" : ",peer_latency_ms,speedup");
  }
  std::fflush(stdout);

  std::mt19937_64 rng(seed);
  for (int64_t seq : seqs) {
    if (seq > cfg.max_position_embeddings)
      throw Error("--seq ", seq, " exceeds the model's max_position_embeddings ", cfg.max_position_embeddings);
    if (format == "table" && !peer.empty()) {  // one section per sequence length, as seed 003
      std::printf("\n- Sequence length %lld\n\n", (long long)seq);
      std::printf("| Batch size | %s Latency (ms) | %s QPS (seq/s) | unmask Latency (ms) | unmask QPS (seq/s) | Speedup |\n",
                  peer_label.c_str(), peer_label.c_str());
      std::printf("|------------|-----------------|----------------|---------------------|--------------------|---------|\n");
    }
    for (int64_t batch : batches) {
      std::vector<int32_t> lengths(batch, int32_t(seq));
      if (len_max) {
        if (len_max > cfg.max_position_embeddings) throw Error("--lengths MAX exceeds max_position_embeddings");
        // The peers' generator (bench/peers/README.md): a 32-bit LCG seeded with
        // --lengths-seed, len = MIN + floor(s * (MAX-MIN+1) / 2^32), so every engine runs the
        // same lengths.
        uint32_t s = uint32_t(args->get_int("lengths-seed"));
        for (auto& l : lengths) {
          s = 1664525u * s + 1013904223u;
          l = int32_t(len_min + int64_t((uint64_t(s) * uint64_t(len_max - len_min + 1)) >> 32));
        }
      }
      int64_t N = 0;
      for (int32_t l : lengths) N += l;
      BertInput in;
      in.input_ids = Tensor::empty({N}, DType::i32);
      std::uniform_int_distribution<int32_t> tok(1000, int32_t(cfg.vocab_size - 1));
      for (int64_t i = 0; i < N; ++i) in.input_ids.data<int32_t>()[i] = tok(rng);
      in.cu_seqlens = Tensor::empty({batch + 1}, DType::i32);
      in.cu_seqlens.data<int32_t>()[0] = 0;
      for (int64_t b = 0; b < batch; ++b) in.cu_seqlens.data<int32_t>()[b + 1] = in.cu_seqlens.data<int32_t>()[b] + lengths[b];
      ForwardOptions fo;
      fo.mlm = fo.nsp = fo.qa = fo.classifier = false;
      fo.pooler = !encoders_only;
      fo.cuda_graph = cuda_graph;
      Tensor hidden;
      if (encoders_only) {
        hidden = Tensor::empty({N, cfg.hidden_size}, DType::f32);
        std::normal_distribution<float> nd(0.f, 1.f);
        for (int64_t i = 0; i < hidden.numel(); ++i) hidden.data<float>()[i] = nd(rng);
        if (model.dtype() != DType::f32) hidden = hidden.cast(model.dtype());
        if (device != Device::cpu) hidden = hidden.to(device);
        fo.embeddings = false;
        fo.hidden_in = &hidden;
      }
      const auto pit = peer.find({batch, seq});
      const PeerRow* pr = pit == peer.end() ? nullptr : &pit->second;
      std::vector<double> times;
      try {
        for (int64_t i = 0; i < warmup; ++i) model.forward(ctx, in, fo);
        const double start = now_s();
        while (int64_t(times.size()) < min_iters || now_s() - start < min_time) {
          ctx.synchronize();  // CUDA: each forward is timed whole (a no-op on the CPU)
          double t0 = now_s();
          BertOutputs out = model.forward(ctx, in, fo);
          ctx.synchronize();
          times.push_back(now_s() - t0);
          if (times.size() > 100000) break;
        }
      } catch (const Error& e) {
        // A shape that cannot run (out of device memory at batch 256 x seq 4096): its row says so,
        // as the seed's table does, and the next shape runs.
        model.clear_cuda_graphs();
        std::fprintf(stderr, "unmask bench: batch %lld seq %lld: %s\n", (long long)batch, (long long)seq, e.what());
        const char* word = failure_word(e.what());
        if (format == "table" && !peer.empty()) {
          const auto [lat, qps] = peer_cells(pr, batch);
          std::printf("| %-10lld | %-15s | %-14s | %-19s | %-18s | %7s |\n", (long long)batch, lat.c_str(), qps.c_str(),
                      word, word, "-");
        } else if (format == "table")
          std::printf("| %10lld | %7lld | %12s | %11s | %7s | %9s |\n", (long long)batch, (long long)seq, word, word, "-", "-");
        else if (format == "csv")
          std::printf("%lld,%lld,%s,,,,%lld,%d%s\n", (long long)batch, (long long)seq, word, (long long)N, ctx.num_threads(),
                      peer.empty() ? "" : ",,");
        else
          std::printf("{\"engine\": \"unmask\", \"batch\": %lld, \"seq\": %lld, \"error\": %s}\n", (long long)batch,
                      (long long)seq, nlohmann::json(std::string(e.what())).dump().c_str());
        std::fflush(stdout);
        continue;
      }
      model.clear_cuda_graphs();  // each shape's graph holds its activations: let go before the next
      ForwardOptions eager = fo;
      eager.cuda_graph = false;  // a replay runs no op front-end, and events must not be captured
      const StepProfile prof = profile_steps(ctx, profile, args->has("profile-shapes"), [&] { model.forward(ctx, in, eager); });
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      Row r{batch, seq, N, med * 1e3, double(batch) / med, forward_flops(cfg, lengths, encoders_only) / med / 1e9, 0, peak_rss_mb()};
      r.pct_peak = peak > 0 ? 100.0 * r.gflops / peak : 0;
      const auto [peer_lat, peer_qps] = peer_cells(pr, batch);
      if (pr && pr->latency_ms == 0) pr = nullptr;  // only an error: no speedup, no peer columns in csv / json
      if (format == "table" && !peer.empty()) {
        if (pr)
          std::printf("| %-10lld | %-15s | %-14s | %-19.2f | %-18.2f | %6.2fx |\n", (long long)r.batch, peer_lat.c_str(),
                      peer_qps.c_str(), r.latency_ms, r.qps, pr->latency_ms / r.latency_ms);
        else
          std::printf("| %-10lld | %-15s | %-14s | %-19.2f | %-18.2f | %7s |\n", (long long)r.batch, peer_lat.c_str(),
                      peer_qps.c_str(), r.latency_ms, r.qps, "-");
      } else if (format == "table")
        std::printf("| %10lld | %7lld | %12.2f | %11.2f | %7.1f | %8.1f%% |\n", (long long)r.batch, (long long)r.seq, r.latency_ms,
                    r.qps, r.gflops, r.pct_peak);
      else if (format == "csv") {
        std::printf("%lld,%lld,%.4f,%.3f,%.2f,%.2f,%lld,%d", (long long)r.batch, (long long)r.seq, r.latency_ms, r.qps, r.gflops,
                    r.pct_peak, (long long)r.tokens, ctx.num_threads());
        if (!peer.empty()) {
          if (pr) std::printf(",%.4f,%.4f", pr->latency_ms, pr->latency_ms / r.latency_ms);
          else std::printf(",,");
        }
        std::printf("\n");
      }
      else
        std::printf("{\"engine\": \"unmask\", \"batch\": %lld, \"seq\": %lld, \"latency_ms\": %.4f, \"qps\": %.3f, "
                    "\"gflop_per_s\": %.2f, \"pct_of_peak\": %.2f, \"tokens\": %lld, \"threads\": %d, \"iters\": %zu, "
                    "\"peak_rss_mb\": %.1f, \"lengths\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", "
                    "\"cuda_graph\": %s, \"activation\": \"%s\"%s%s}\n",
                    (long long)r.batch, (long long)r.seq, r.latency_ms, r.qps, r.gflops, r.pct_peak, (long long)r.tokens,
                    ctx.num_threads(), times.size(), r.rss_mb, len_max ? args->get("lengths").c_str() : "fixed",
                    devices.c_str(), precision.c_str(), cuda_graph ? "true" : "false", act.c_str(),
                    pr ? (", \"peer\": " + nlohmann::json(pr->name).dump() + ", \"peer_latency_ms\": " + std::to_string(pr->latency_ms) +
                          ", \"speedup\": " + std::to_string(pr->latency_ms / r.latency_ms)).c_str()
                       : "",
                    prof.steps > 0 ? (", \"profile\": " + step_profile_json(prof)).c_str() : "");
      if (format == "table") print_step_profile(prof);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  const char* kBenchUsage =
      "usage: unmask bench <what> [options]\n\n"
      "  infer     BERT inference: batch, seq, latency, QPS, GFLOP/s, % of peak (AITemplate's table)\n"
      "  train     BERT pretraining: sequences/s, GFLOP/s, MFU (NVIDIA DLE's table)\n"
      "  videomae  VideoMAE pretraining: videos/s, model FLOPs, MFU, peak memory (V-SWIFT's table)\n"
      "  bevt      BEVT joint pretraining: average iter time, it/s, samples/s (FAMBench's BEVT), clips/s, MFU\n"
      "  loader    video clip loader: clips/s and the read / augment / copy split (store or list)\n"
      "  scaling   data-parallel weak scaling over MPI ranks: s/it, samples/s, efficiency (BEVT's table)\n\n"
      "Run `unmask bench <what> --help` for its options.\n";
  if (argc < 3 || std::string(argv[2]) == "--help" || std::string(argv[2]) == "-h") {
    std::fputs(kBenchUsage, argc < 3 ? stderr : stdout);
    return argc < 3 ? 2 : 0;
  }
  std::string what = argv[2];
  if (what == "infer") return bench_infer(argc, argv);
  if (what == "train") return bench_train(argc, argv);
  if (what == "videomae") return bench_videomae(argc, argv);
  if (what == "loader") return bench_loader(argc, argv);
  if (what == "bevt") return bench_bevt(argc, argv);
  if (what == "scaling") return bench_scaling(argc, argv);
  throw Error("unknown benchmark '", what, "'", Hint("available: infer, train, videomae, bevt, loader, scaling"));
}

}  // namespace unmask::cli
