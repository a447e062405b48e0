// core/signals.cc: see core/signals.h for why the compute threads block asynchronous signals.
#include "core/signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
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

namespace {
std::atomic<int> g_stop_signal{0};
char g_stop_message_int[160], g_stop_message_term[160];

void on_stop_signal(int sig) {
  g_stop_signal.store(sig);
  const char* msg = sig == SIGINT ? g_stop_message_int : g_stop_message_term;
  ssize_t ignored = ::write(2, msg, std::strlen(msg));  // async-signal-safe
  (void)ignored;
}
}  // namespace

const std::atomic<int>* install_stop_handlers(const char* command) {
  std::snprintf(g_stop_message_int, sizeof g_stop_message_int,
                "\nunmask %s: SIGINT: finishing this step and saving a checkpoint (Ctrl-C again aborts)\n", command);
  std::snprintf(g_stop_message_term, sizeof g_stop_message_term,
                "\nunmask %s: SIGTERM: finishing this step and saving a checkpoint\n", command);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESETHAND: the second signal takes the default action (terminate); SA_RESTART: reads and
  // writes in flight (shards, checkpoints) resume instead of failing with EINTR.
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return &g_stop_signal;
}

}  // namespace unmask
