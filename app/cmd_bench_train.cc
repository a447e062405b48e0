// app/cmd_bench_train.cc: placeholder until the command lands (issue 3).
#include "cli.h"
#include "unmask/error.h"

namespace unmask::cli {
int bench_train(int, char**) { throw Error("bench_train: not built yet"); }
}  // namespace unmask::cli
