#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, with Pliant's burst buffer, for tests and by hand.
#
#   tools/slurm/cluster.sh start DIR   # configure and start munged, slurmctld and slurmd in DIR
#   tools/slurm/cluster.sh env DIR     # the shell lines that point Slurm's commands at it
#   tools/slurm/cluster.sh stop DIR    # stop the three daemons (each by its own pid)
#   tools/slurm/cluster.sh restart-controller DIR   # slurmctld stopped and started again
#
# DIR is made if missing and holds everything: slurm.conf, burst_buffer.conf, a copy of
# burst_buffer.lua, the Prolog and Epilog, munge's key and socket, the daemons' state, spool
# and logs. Nothing listens beyond loopback; the ports are picked free at start.
#
# Run as root: the daemons run as root here, the controller included (SlurmUser=root). A site
# runs slurmctld as its own SlurmUser; it is root here only because this is a throw-away test
# cluster on one machine. slurmd runs in its own mount namespace (unshare), so a mount the
# Prolog makes "on the compute node" is seen only there (nsenter -t SLURMD_PID -m), not by the
# controller or the shell that started it.
#
# Settings (environment of `start`):
#   PLIANT_BIN            the pliant binary (required; an absolute path)
#   PLIANT_BB_POOL_BYTES  the size of pool "pliant" (default 1073741824)
#   PLIANT_BB_STATE_DIR   what the controller hands the node (default DIR/bb-state)
#   PLIANT_JOB_ROOT       where jobs' mounts and caches go on the node (default DIR/jobs)
#   PLIANT_BB_GIVE_UP_AFTER  seconds the Epilog's write-back may keep failing (default pliant's)
#   PLIANT_BB_DECISION_WAIT  seconds the Epilog waits for the controller's word (default 600)
#   PLIANT_BB_STAGE_OUT_WAIT, PLIANT_BB_TEARDOWN_WAIT  burst_buffer.lua's waits for the node
#   SLURM_TIMEOUT         seconds to wait for each daemon (default 60)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
usage() {
  echo "usage: $0 start|stop|env|restart-controller DIR" >&2
  exit 2
}
[ $# -eq 2 ] || usage
cmd=$1
dir=$2
timeout=${SLURM_TIMEOUT:-60}

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

env_lines() {
  echo "export SLURM_CONF=$dir/slurm.conf"
  echo "export PLIANT_SLURM_DIR=$dir"
  echo "export SLURMD_PID=$(cat "$dir/slurmd.pid" 2>/dev/null || true)"
  echo "export SLURMCTLD_PID=$(cat "$dir/slurmctld.pid" 2>/dev/null || true)"
  echo "export PLIANT_BB_STATE_DIR=$(cat "$dir/state_dir" 2>/dev/null || true)"
  echo "export PLIANT_JOB_ROOT=$(cat "$dir/job_root" 2>/dev/null || true)"
}

# Stops the process whose pid is in FILE (if it is still the one we started: its command
# line names NAME), first with SIGTERM, then after the timeout with SIGKILL.
stop_pid() {
  local file=$1 name=$2 pid i
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  [ -n "$pid" ] || return 0
  if [ -d "/proc/$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$name"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 10; i++)); do
      [ -d "/proc/$pid" ] || break
      sleep 0.1
    done
    if [ -d "/proc/$pid" ]; then
      echo "cluster.sh: $name ($pid) did not stop in ${timeout}s: killed" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$file"
}

stop() {
  stop_pid "$dir/slurmd.pid" slurmd
  stop_pid "$dir/slurmctld.pid" slurmctld
  stop_pid "$dir/munged.pid" munged
}

# Waits (bounded) until COMMAND succeeds; names WHAT and its log otherwise.
wait_for() {
  local what=$1 log=$2 i
  shift 2
  for ((i = 0; i < timeout * 10; i++)); do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  echo "cluster.sh: $what did not come up in ${timeout}s; the end of $log:" >&2
  tail -n 20 "$log" >&2 || true
  stop
  exit 1
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_controller() {
  (
    set -a
    # shellcheck source=/dev/null
    . "$dir/controller.env"
    exec slurmctld -D -f "$dir/slurm.conf" </dev/null >>"$dir/slurmctld.out" 2>&1
  ) &
  echo $! >"$dir/slurmctld.pid"
  wait_for slurmctld "$dir/slurmctld.log" env SLURM_CONF="$dir/slurm.conf" scontrol ping
}

# Stops slurmctld and starts it again on its saved state: jobs, and the burst buffers' pool
# use, carry over.
restart_controller() {
  [ -f "$dir/controller.env" ] || die "$dir has no cluster started by this script"
  stop_pid "$dir/slurmctld.pid" slurmctld
  start_controller
  env_lines
}

start() {
  [ "$(id -u)" = 0 ] || die "start needs root (the daemons run as root)"
  [ -n "${PLIANT_BIN:-}" ] || die "PLIANT_BIN must name the pliant binary"
  [ -x "$PLIANT_BIN" ] || die "PLIANT_BIN=$PLIANT_BIN is not an executable"
  local c
  for c in munged mungekey slurmctld slurmd sbatch scontrol; do
    command -v "$c" >/dev/null || die "$c is missing (packages: munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins)"
  done
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  # Slurm's clients (sbatch by an ordinary user) read slurm.conf and reach munge's socket here.
  chmod 0755 "$dir"
  local state=${PLIANT_BB_STATE_DIR:-$dir/bb-state}
  local jobs=${PLIANT_JOB_ROOT:-$dir/jobs}
  local pool=${PLIANT_BB_POOL_BYTES:-1073741824}
  mkdir -p "$dir/munge" "$dir/ctld" "$dir/spool" "$state" "$jobs"
  chmod 0755 "$dir/munge" "$jobs"
  chmod 0700 "$dir/ctld" "$dir/spool" "$state"
  echo "$state" >"$dir/state_dir"
  echo "$jobs" >"$dir/job_root"

  # munge: its own key and socket, so it neither needs nor disturbs a system munged.
  rm -f "$dir/munge/munge.key"
  mungekey --create --keyfile="$dir/munge/munge.key" --force >/dev/null 2>&1 ||
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge/munge.key"
  local sock=$dir/munge/munge.socket
  # --force: the key and socket live under /tmp, whose sticky, world-writable mode munged
  # otherwise refuses.
  munged --foreground --force --socket="$sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid.own" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" </dev/null >>"$dir/munge/munged.log" 2>&1 &
  echo $! >"$dir/munged.pid"
  wait_for munged "$dir/munge/munged.log" bash -c "munge -n -S '$sock' | unmunge -S '$sock'"

  local node ctld_port d_port cpus mem
  node=$(hostname -s)
  ctld_port=$(free_port)
  d_port=$(free_port)
  while [ "$d_port" = "$ctld_port" ]; do d_port=$(free_port); done
  cpus=$(nproc)
  mem=$(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo)

  cat >"$dir/slurm.conf" <<EOF
# Written by tools/slurm/cluster.sh: a one-node test cluster, loopback only.
ClusterName=pliant
SlurmctldHost=$node(127.0.0.1)
# root only because this is a throw-away cluster on one machine; a site uses its slurm user.
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/ctld/slurmctld.pid
SlurmdPidFile=$dir/spool/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
DebugFlags=BurstBuffer
# No cgroups and no accounting: nothing here needs them.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=60
MinJobAge=300
# Pliant: the controller's side (burst_buffer.lua, next to this file) and the node's.
BurstBufferType=burst_buffer/lua
Prolog=$dir/prolog
Epilog=$dir/epilog
PrologFlags=Alloc
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  cat >"$dir/burst_buffer.conf" <<EOF
# Written by tools/slurm/cluster.sh.
Directive=DW
StageInTimeout=120
StageOutTimeout=120
# Longer than burst_buffer.lua's wait for a node's discard (PLIANT_BB_TEARDOWN_WAIT, 120 s).
OtherTimeout=300
EOF
  cp "$here/burst_buffer.lua" "$dir/burst_buffer.lua"
  local hook give_up="" decision=""
  if [ -n "${PLIANT_BB_GIVE_UP_AFTER:-}" ]; then
    give_up="export PLIANT_BB_GIVE_UP_AFTER='$PLIANT_BB_GIVE_UP_AFTER'"
  fi
  if [ -n "${PLIANT_BB_DECISION_WAIT:-}" ]; then
    decision="export PLIANT_BB_DECISION_WAIT='$PLIANT_BB_DECISION_WAIT'"
  fi
  for hook in prolog epilog; do
    cat >"$dir/$hook" <<EOF
#!/bin/sh
# Written by tools/slurm/cluster.sh: slurmd runs this as root on the node.
export PLIANT_BIN='$PLIANT_BIN'
export PLIANT_BB_STATE_DIR='$state'
export PLIANT_JOB_ROOT='$jobs'
$give_up
$decision
exec '$here/node.sh' $hook
EOF
    chmod 0755 "$dir/$hook"
  done

  # The controller reads its settings from its environment (burst_buffer.lua's os.getenv),
  # kept for a restart.
  {
    echo "PLIANT_BIN='$PLIANT_BIN'"
    echo "PLIANT_BB_STATE_DIR='$state'"
    echo "PLIANT_JOB_ROOT='$jobs'"
    echo "PLIANT_BB_POOL_BYTES='$pool'"
    if [ -n "${PLIANT_BB_STAGE_OUT_WAIT:-}" ]; then
      echo "PLIANT_BB_STAGE_OUT_WAIT='$PLIANT_BB_STAGE_OUT_WAIT'"
    fi
    if [ -n "${PLIANT_BB_TEARDOWN_WAIT:-}" ]; then
      echo "PLIANT_BB_TEARDOWN_WAIT='$PLIANT_BB_TEARDOWN_WAIT'"
    fi
    echo "SLURM_CONF='$dir/slurm.conf'"
  } >"$dir/controller.env"
  start_controller

  # The compute node: its own mount namespace, private, so its mounts stay there.
  unshare --mount --propagation private \
    slurmd -D -f "$dir/slurm.conf" -N "$node" </dev/null >>"$dir/slurmd.out" 2>&1 &
  echo $! >"$dir/slurmd.pid"
  wait_for "slurmd (node $node idle)" "$dir/slurmd.log" bash -c \
    "SLURM_CONF='$dir/slurm.conf' sinfo -h -n '$node' -o %T | grep -qx idle"
  env_lines
}

case $cmd in
start) start ;;
stop) stop ;;
restart-controller) restart_controller ;;
env) env_lines ;;
*) usage ;;
esac
