#!/usr/bin/env bash
# A single-node Slurm on this machine, to check that unmask's data-parallel runs start under
# srun (issue 5; tests/mpi/test_srun.sh uses it). Debian 12, as root, no systemd needed.
#
#   tests/mpi/slurm_single_node.sh         # install (apt), start munged, slurmctld, slurmd; idempotent
#   tests/mpi/slurm_single_node.sh stop    # stop the daemons this script started (by their pid files)
#
# What it does, each step skipped when already done:
#   1. apt-get install slurmctld slurmd slurm-client munge (Debian's Slurm 22.05 ships the
#      mpi/pmix plugin, so `srun --mpi=pmix` starts Debian's Open MPI 4.1 programs directly;
#      Open MPI has no PMI-2 client, so --mpi=pmi2 and --mpi=none do NOT work with it);
#   2. munged as user munge (key /etc/munge/munge.key, made by mungekey when missing);
#   3. /etc/slurm/slurm.conf: one node = $(hostname) with CPUs=max(4, nproc) (more than the cores,
#      so 3-rank tests fit on a 2-core machine; SlurmdParameters=config_overrides keeps the node up),
#      partition debug (default), MpiDefault=pmix, ProctrackType=proctrack/linuxproc, TaskPlugin=
#      task/none (no cgroups), select/cons_tres, SlurmUser=root, state/spool/logs under /tmp/slurm.
#      An existing slurm.conf not written by this script is left alone (the script stops).
#   4. slurmctld and slurmd in the background (they idle at ~0% CPU), then waits until `sinfo`
#      shows the node idle and `srun -n 2 hostname` runs.
# Logs: /tmp/slurm/log/{slurmctld,slurmd}.log. Try: srun -n 2 --mpi=pmix build/unmask dist-check
set -euo pipefail
STATE=/tmp/slurm
CONF=/etc/slurm/slurm.conf
MARK="# written by unmask tests/mpi/slurm_single_node.sh"

say() { echo "slurm_single_node: $*"; }
die() { echo "slurm_single_node: error: $*" >&2; exit 1; }

if [ "${1:-}" = stop ]; then
  for pidfile in "$STATE/slurmd.pid" "$STATE/slurmctld.pid" /run/munge/munged.pid; do
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid" && say "stopped $(basename "$pidfile" .pid) (pid $pid)"; fi
  done
  exit 0
fi

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts daemons)"
HOST=$(hostname)
getent hosts "$HOST" >/dev/null || die "the host name '$HOST' does not resolve; add '127.0.0.1 $HOST' to /etc/hosts"

# 1. packages
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v srun >/dev/null \
    || ! command -v munged >/dev/null; then
  say "installing slurmctld slurmd slurm-client munge"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge \
    >/tmp/slurm-apt.log 2>&1 || { apt-get update >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge >/tmp/slurm-apt.log 2>&1; } \
    || die "apt-get install failed, see /tmp/slurm-apt.log"
fi

# 2. munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key && chown munge:munge /etc/munge/munge.key \
    && chmod 600 /etc/munge/munge.key; }
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  chmod 755 /run/munge
  # --force: start even if a stale socket is left from an earlier run
  su -s /bin/sh munge -c '/usr/sbin/munged --force' || die "munged did not start (see /var/log/munge/munged.log)"
  for _ in $(seq 1 20); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
  munge -n | unmunge >/dev/null 2>&1 || die "munge does not answer"
  say "munged started"
fi

# 3. slurm.conf
CPUS=$(nproc)
[ "$CPUS" -lt 4 ] && CPUS=4
mkdir -p "$STATE/state" "$STATE/spool" "$STATE/log" /etc/slurm
if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  die "$CONF exists and was not written by this script; leaving it alone"
fi
NEW=$(cat <<EOF
$MARK
ClusterName=unmask
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
SlurmdParameters=config_overrides
StateSaveLocation=$STATE/state
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
NodeName=$HOST CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
)
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$NEW" ]; then
  printf '%s\n' "$NEW" > "$CONF"
  say "wrote $CONF (node $HOST, CPUs=$CPUS)"
  CHANGED=1
fi

# 4. daemons (started from $STATE so core files and cwd-relative paths stay there)
running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if running "$STATE/slurmctld.pid" && [ -n "${CHANGED:-}" ]; then scontrol reconfigure || true; fi
if ! running "$STATE/slurmctld.pid"; then
  (cd "$STATE" && slurmctld -i) || die "slurmctld did not start, see $STATE/log/slurmctld.log"
  say "slurmctld started"
fi
for _ in $(seq 1 30); do timeout 5 scontrol ping 2>/dev/null | grep -q UP && break; sleep 1; done
timeout 5 scontrol ping | grep -q UP || die "slurmctld does not answer, see $STATE/log/slurmctld.log"
if ! running "$STATE/slurmd.pid"; then
  (cd "$STATE" && slurmd) || die "slurmd did not start, see $STATE/log/slurmd.log"
  say "slurmd started"
fi
for _ in $(seq 1 30); do
  st=$(sinfo -h -n "$HOST" -o %T 2>/dev/null || true)
  case "$st" in idle* | mixed* | allocated*) break ;; down* | drain*) scontrol update nodename="$HOST" state=resume 2>/dev/null || true ;; esac
  sleep 1
done
sinfo
timeout 60 srun -n 2 hostname >/dev/null || die "srun -n 2 hostname failed, see $STATE/log/slurmd.log"
say "ready: srun -n 2 hostname runs; MPI plugins: $(srun --mpi=list 2>&1 | tr -s '\n\t ' ' ')"
