// core/signals.h: asynchronous signals are taken by one thread that runs no compute code.
//
// Debian's oneDNN (2.x) runs its AVX-512 sgemm kernels with rsp pointing into a heap workspace
// (oneDNN issue #4845, fixed upstream in 3.11 by PR #4855). The kernel pushes a signal frame
// at rsp, so a signal handled on a thread inside one of those kernels writes into the heap:
// `pretrain` interrupted with Ctrl-C aborted with "corrupted size vs. prev_size" in free()
// or read a batch of garbage token ids in the step after the signal (tests/cli/
// test_signal_stress.sh). Any handler, even one that only sets a flag, does it.
//
// So main() calls start_signal_thread() before any other thread exists: it blocks the
// asynchronous signals in the calling thread (every thread started afterwards inherits the
// mask: the thread pool, loaders, oneDNN's) and starts one thread that has them unblocked and
// only waits. The kernel delivers a process-directed signal to a thread that does not block
// it, i.e. that one (or a thread a library started before main, such as OpenBLAS's idle pool):
// default actions (terminate) and installed handlers work as before, off the compute threads.
#pragma once
#include <atomic>

namespace unmask {

/// Blocks SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM and SIGWINCH in the
/// calling thread and starts the thread that takes them. Call once, first thing in main().
void start_signal_thread();

/// Unblocks those signals in the calling thread: a child between fork() and exec() calls it
/// (the mask survives exec, and the program run there expects the default).
void unblock_async_signals();

/// True when the calling thread blocks SIGINT and SIGTERM (tests: compute threads must).
bool async_signals_blocked();

/// A training command's stop request: SIGINT and SIGTERM set the returned flag to the signal's
/// number and print "unmask COMMAND: SIGINT: finishing this step and saving a checkpoint"; a
/// second one takes the default action (terminates). The trainer polls the flag between steps.
const std::atomic<int>* install_stop_handlers(const char* command);

}  // namespace unmask
