// app/cmd_prepare_text.cc: placeholder until the command lands (issue 3).
#include "cli.h"
#include "unmask/error.h"

namespace unmask::cli {
int cmd_prepare_text(int, char**) { throw Error("cmd_prepare_text: not built yet"); }
}  // namespace unmask::cli
