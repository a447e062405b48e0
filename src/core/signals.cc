// core/signals.cc: see core/signals.h for why the compute threads block asynchronous signals.
#include "core/signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

namespace unmask {

namespace {

sigset_t async_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGWINCH}) sigaddset(&set, s);
  return set;
}

}  // namespace

void start_signal_thread() {
  static bool started = false;
  if (started) return;
  started = true;
  const sigset_t set = async_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // Detached: it lives as long as the process; pause() returns after each handler and waits again.
  std::thread([set] {
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    for (;;) ::pause();
  }).detach();
}

void unblock_async_signals() {
  const sigset_t set = async_signal_set();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

bool async_signals_blocked() {
  sigset_t current;
  pthread_sigmask(SIG_BLOCK, nullptr, &current);
  return sigismember(&current, SIGINT) == 1 && sigismember(&current, SIGTERM) == 1;
}

}  // namespace unmask
