// app/main.cc: the `unmask` binary. Each subcommand lives in its own file; errors become one
// line on stderr and a non-zero exit.
#include <cstdio>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#include "cli.h"
#include "core/signals.h"
#include "train/config.h"
#include "unmask/context.h"
#include "unmask/dist.h"
#include "unmask/error.h"
#include "unmask_version.h"  // generated: UNMASK_GIT_COMMIT

namespace {

const char* kUsage =
    "usage: unmask <command> [options]\n"
    "\n"
    "commands:\n"
    "  infer     fill-mask demo: top-k tokens for each [MASK] in a text; --dump writes HF-named .npy outputs\n"
    "  forward   run a batch given as .npy token ids (padded or packed) and dump every output\n"
    "  bench     benchmarks: `unmask bench infer ...` (the AITemplate BERT table), `unmask bench train ...`\n"
    "  prepare-text  text files -> DLE HDF5 pretraining shards (create_pretraining_data rules)\n"
    "  train-vocab  a WordPiece vocabulary trained from raw text (HF BertWordPieceTokenizer.train's algorithm)\n"
    "  pretrain  BERT pretraining (MLM + NSP, LAMB/AdamW) from a config file; checkpoints, --resume\n"
    "  finetune  fine-tune an HF model: SQuAD v1.1, GLUE-style TSV, CoNLL token classification\n"
    "  eval      evaluate an HF model on SQuAD / TSV / CoNLL data (EM/F1, accuracy, entity F1), or --task mlm\n"
    "  predict   run a fine-tuned model on unlabelled data: classes, tags or answers with probabilities\n"
    "  embed     sentence embeddings (CLS or mean pooling) of a text file's lines -> .npy\n"
    "  train-step  forward+backward+optimizer steps on .npy batches; dumps losses and gradients\n"
    "  make-videos  synthetic labelled action videos (VP9/H.264 via FFmpeg) + VideoMAE/V-SWIFT lists\n"
    "  prepare-video  a video list -> a decode-once clip store (resized uint8 frames, chunked, checksummed)\n"
    "  pretrain-video  VideoMAE pretraining (tube masking) on a clip store or a list file\n"
    "  finetune-video  VideoMAE fine-tuning (layer decay, mixup/cutmix, drop path) + multi-view top-1/top-5\n"
    "  eval-video  multi-view top-1/top-5 of a fine-tuned VideoMAE checkpoint\n"
    "  videomae-step  one VideoMAE pretraining step on a random model; dumps inputs, params, grads\n"
    "  pretrain-bevt  BEVT joint pretraining (Video Swin, clips + images, DALL-E tokenizer targets)\n"
    "  finetune-swin  Video Swin fine-tuning for action recognition (from pretrain-bevt or Video Swin weights)\n"
    "  bevt-step  one BEVT pretraining step; dumps inputs, params, grads (BEVT names) for parity checks\n"
    "  convert-videomae  VideoMAE checkpoint (.pth / safetensors, original or HF names) -> safetensors dir\n"
    "  version   the commit and what this build holds: CPU kernels, CUDA backend and devices, MPI, NCCL\n"
    "            (also --version)\n"
    "  dist-check  check a data-parallel launch (mpirun -np N / srun): every rank all-reduces a known pattern\n"
    "\n"
    "Run `unmask <command> --help` for the options of a command.\n";

/// A command's error: under mpirun the other ranks would wait in their next collective until its
/// timeout, so the whole job ends now, with the message (whatever the exception's type: a host
/// out-of-memory is the likeliest failure at scale). Then one line on stderr, exit 1.
int fail(const std::string& cmd, const std::string& message) {
  if (unmask::Communicator::world_initialized() && unmask::Communicator::world().size() > 1)
    unmask::Communicator::world().abort(1, "unmask " + cmd + ": error: " + message);
  std::fprintf(stderr, "unmask %s: error: %s\n", cmd.c_str(), message.c_str());
  return 1;
}

const char* kCommands[] = {"infer",         "forward",        "bench",          "prepare-text",  "train-vocab",
                           "pretrain",      "finetune",       "eval",           "predict",       "embed",
                           "train-step",    "make-videos",    "prepare-video",  "pretrain-video", "finetune-video",
                           "eval-video",    "videomae-step",  "convert-videomae", "version",     "dist-check",
                           "pretrain-bevt", "bevt-step",     "finetune-swin"};

/// The command nearest to a mistyped one (edit distance at most 3, or one that starts with it).
std::string nearest_command(const std::string& cmd) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const char* c : kCommands) {
    size_t d = unmask::train::edit_distance(cmd, c);
    if (std::string(c).rfind(cmd, 0) == 0 && cmd.size() >= 3) d = std::min<size_t>(d, 1);
    if (d < best_d) best_d = d, best = c;
  }
  return best_d <= 3 ? best : "";
}

}  // namespace

int main(int argc, char** argv) {
  // Before any other thread starts: signals are handled off the compute threads (core/signals.h).
  unmask::start_signal_thread();
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "-V") cmd = "version";
  try {
    if (cmd == "infer") return unmask::cli::cmd_infer(argc, argv);
    if (cmd == "forward") return unmask::cli::cmd_forward(argc, argv);
    if (cmd == "bench") return unmask::cli::cmd_bench(argc, argv);
    if (cmd == "prepare-text") return unmask::cli::cmd_prepare_text(argc, argv);
    if (cmd == "train-vocab") return unmask::cli::cmd_train_vocab(argc, argv);
    if (cmd == "pretrain") return unmask::cli::cmd_pretrain(argc, argv);
    if (cmd == "train-step") return unmask::cli::cmd_train_step(argc, argv);
    if (cmd == "videomae-step") return unmask::cli::cmd_videomae_step(argc, argv);
    if (cmd == "pretrain-bevt") return unmask::cli::cmd_pretrain_bevt(argc, argv);
    if (cmd == "finetune-swin") return unmask::cli::cmd_finetune_swin(argc, argv);
    if (cmd == "bevt-step") return unmask::cli::cmd_bevt_step(argc, argv);
    if (cmd == "convert-videomae") return unmask::cli::cmd_convert_videomae(argc, argv);
    if (cmd == "finetune") return unmask::cli::cmd_finetune(argc, argv);
    if (cmd == "eval") return unmask::cli::cmd_eval(argc, argv);
    if (cmd == "predict") return unmask::cli::cmd_predict(argc, argv);
    if (cmd == "embed") return unmask::cli::cmd_embed(argc, argv);
    if (cmd == "pretrain-video") return unmask::cli::cmd_pretrain_video(argc, argv);
    if (cmd == "finetune-video") return unmask::cli::cmd_finetune_video(argc, argv);
    if (cmd == "eval-video") return unmask::cli::cmd_eval_video(argc, argv);
    if (cmd == "make-videos") return unmask::cli::cmd_make_videos(argc, argv);
    if (cmd == "prepare-video") return unmask::cli::cmd_prepare_video(argc, argv);
    if (cmd == "dist-check") return unmask::cli::cmd_dist_check(argc, argv);
    if (cmd == "version") {
      const unmask::BuildInfo b = unmask::build_info();
      std::printf("unmask %s (C++20)\n  cpu kernels: %s\n  cpu bf16 unit: %s\n  cuda backend: %s", UNMASK_GIT_COMMIT,
                  b.cpu_isa.c_str(), b.cpu_bf16_unit.empty() ? "none (--precision bf16 needs AMX or AVX-512 BF16)"
                  : b.cpu_bf16_unit == "amx" ? "AMX" : "AVX-512 BF16", b.cuda ? "yes" : "no");
      if (b.cuda) std::printf(" (archs %s; %d device(s) visible)", b.cuda_archs.c_str(), b.cuda_devices);
      std::printf("\n  mpi: %s\n  nccl: %s\n  onednn: %s\n", b.mpi ? "yes" : "no", b.nccl ? "yes" : "no",
                  b.dnnl ? "yes" : "no");
      return 0;
    }
    const std::string near = nearest_command(cmd);
    if (!near.empty()) {
      std::fprintf(stderr, "unmask: unknown command '%s' (hint: did you mean `unmask %s`?)\n", cmd.c_str(), near.c_str());
      return 2;
    }
    std::fprintf(stderr, "unmask: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const unmask::Error& e) {
    return fail(cmd, e.what());
  } catch (const std::bad_alloc&) {
    return fail(cmd, "out of memory (try a smaller --batch or --seq)");
  } catch (const std::exception& e) {
    return fail(cmd, e.what());
  }
}
