// app/cmd_pretrain.cc: placeholder until the command lands (issue 3).
#include "cli.h"
#include "unmask/error.h"

namespace unmask::cli {
int cmd_pretrain(int, char**) { throw Error("cmd_pretrain: not built yet"); }
}  // namespace unmask::cli
