// app/cmd_train_step.cc: placeholder until the command lands (issue 3).
#include "cli.h"
#include "unmask/error.h"

namespace unmask::cli {
int cmd_train_step(int, char**) { throw Error("cmd_train_step: not built yet"); }
}  // namespace unmask::cli
