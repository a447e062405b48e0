// app/cmd_finetune.cc: placeholder until the command lands (issue 3).
#include "cli.h"
#include "unmask/error.h"

namespace unmask::cli {
int cmd_finetune(int, char**) { throw Error("cmd_finetune: not built yet"); }
int cmd_eval(int, char**) { throw Error("cmd_eval: not built yet"); }
}  // namespace unmask::cli
