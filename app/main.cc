// app/main.cc: the `unmask` binary. Each subcommand lives in its own file; errors become one
// line on stderr and a non-zero exit.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli.h"
#include "unmask/error.h"

namespace {

const char* kUsage =
    "usage: unmask <command> [options]\n"
    "\n"
    "commands:\n"
    "  infer     fill-mask demo: top-k tokens for each [MASK] in a text; --dump writes HF-named .npy outputs\n"
    "  forward   run a batch given as .npy token ids (padded or packed) and dump every output\n"
    "  bench     benchmarks: `unmask bench infer ...` (the AITemplate BERT table)\n"
    "\n"
    "Run `unmask <command> --help` for the options of a command.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  try {
    if (cmd == "infer") return unmask::cli::cmd_infer(argc, argv);
    if (cmd == "forward") return unmask::cli::cmd_forward(argc, argv);
    if (cmd == "bench") return unmask::cli::cmd_bench(argc, argv);
    std::fprintf(stderr, "unmask: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const unmask::Error& e) {
    std::fprintf(stderr, "unmask %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "unmask %s: error: out of memory (try a smaller --batch or --seq)\n", cmd.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unmask %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
