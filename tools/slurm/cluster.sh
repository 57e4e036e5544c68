#!/usr/bin/env bash
# A Slurm cluster on this machine (one node, or PLIANT_SLURM_NODES), with Pliant's burst buffer,
# for tests and by hand.
#
#   tools/slurm/cluster.sh start DIR   # configure and start munged, slurmctld and slurmd in DIR
#   tools/slurm/cluster.sh env DIR     # the shell lines that point Slurm's commands at it
#   tools/slurm/cluster.sh stop DIR    # stop the daemons (each by its own pid), remove the network
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
# With PLIANT_SLURM_NODES=N (N > 1), N compute nodes n1..nN, each a slurmd with a network
# namespace of its own as well (Debian's slurmd is not built for several on one host, so each
# needs its own address and the same port): a private bridge pliant-brX in this namespace at
# 10.213.X.1/24 (X picked free at start), where slurmctld is reached, and node k at 10.213.X.(10+k)
# on a veth pair. Each node has its own job root too: the same path (PLIANT_JOB_ROOT, which
# the controller hands every node's job as $DW_JOB_STRIPED_CACHE) with DIR/jobs-nK mounted
# over it in the node's mount namespace. `stop` removes the namespaces, veths and bridge
# (DIR/net says which).
#
# Settings (environment of `start`):
#   PLIANT_BIN            the pliant binary (required; an absolute path)
#   PLIANT_BB_POOL_BYTES  the size of pool "pliant" (default 1073741824)
#   PLIANT_BB_STATE_DIR   what the controller hands the node (default DIR/bb-state)
#   PLIANT_JOB_ROOT       where jobs' mounts and caches go on the node (default DIR/jobs)
#   PLIANT_BB_GIVE_UP_AFTER  seconds the Epilog's write-back may keep failing (default pliant's)
#   PLIANT_BB_DECISION_WAIT  seconds the Epilog waits for the controller's word (default 600)
#   PLIANT_BB_STAGE_OUT_WAIT, PLIANT_BB_TEARDOWN_WAIT  burst_buffer.lua's waits for the node
#   PLIANT_SLURM_NODES    how many compute nodes (default 1: no network of its own)
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

# The network of a cluster of several nodes, from DIR/net: its X (10.213.X.0/24) and node count.
net_x=
net_nodes=
read_net() {
  net_x=
  net_nodes=
  if [ -f "$dir/net" ]; then
    read -r net_x net_nodes <"$dir/net" || true
  fi
}

env_lines() {
  read_net
  local first=slurmd.pid pids="" k
  [ -z "$net_x" ] || first=slurmd-n1.pid
  echo "export SLURM_CONF=$dir/slurm.conf"
  echo "export PLIANT_SLURM_DIR=$dir"
  echo "export SLURMD_PID=$(cat "$dir/$first" 2>/dev/null || true)"
  echo "export SLURMCTLD_PID=$(cat "$dir/slurmctld.pid" 2>/dev/null || true)"
  echo "export PLIANT_BB_STATE_DIR=$(cat "$dir/state_dir" 2>/dev/null || true)"
  echo "export PLIANT_JOB_ROOT=$(cat "$dir/job_root" 2>/dev/null || true)"
  if [ -n "$net_x" ]; then
    # Node k's slurmd is the k-th: its namespaces are entered with nsenter -t PID -m (-n).
    for ((k = 1; k <= net_nodes; k++)); do
      pids="$pids${pids:+ }$(cat "$dir/slurmd-n$k.pid" 2>/dev/null || true)"
    done
    echo "export SLURMD_PIDS='$pids'"
    echo "export PLIANT_SLURM_NET=10.213.$net_x"
  fi
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
  read_net
  local k
  stop_pid "$dir/slurmd.pid" slurmd
  for ((k = 1; k <= ${net_nodes:-0}; k++)); do
    stop_pid "$dir/slurmd-n$k.pid" slurmd
  done
  stop_pid "$dir/slurmctld.pid" slurmctld
  stop_pid "$dir/munged.pid" munged
  remove_net
}

# Removes what make_net made (whatever part of it exists), named by DIR/net.
remove_net() {
  read_net
  [ -n "$net_x" ] || return 0
  local k
  for ((k = 1; k <= net_nodes; k++)); do
    if [ -e "/run/netns/pliant-$net_x-n$k" ]; then
      ip netns del "pliant-$net_x-n$k" || true
    fi
    # A process left in the node's namespace (a job's cache server) keeps it, and so the veth
    # pair, alive after its name is gone: the pair goes with this end.
    if ip link show "pliant-$net_x-n$k" >/dev/null 2>&1; then
      ip link del "pliant-$net_x-n$k" || true
    fi
  done
  if ip link show "pliant-br$net_x" >/dev/null 2>&1; then
    ip link del "pliant-br$net_x" || true
  fi
  rm -f "$dir/net"
}

# A private bridge and one network namespace per node (see the top of this file), for N nodes.
# Fails (status 1, saying why) as soon as a step does; DIR/net, written as soon as the bridge
# is ours, lets stop remove whatever of it was made.
make_net() {
  local n=$1 x tries=0 k ns
  x=$(($$ % 200 + 20))
  # Making the bridge claims X: of two clusters starting at once, only one can.
  until ! ip -4 addr | grep -q " 10\.213\.$x\." &&
    ! ip -4 route | grep -q "^10\.213\.$x\." &&
    ! ip netns list | grep -q "^pliant-$x-" &&
    ip link add "pliant-br$x" type bridge 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -ge 236 ]; then
      echo "cluster.sh: no free subnet 10.213.X.0/24 (X from 20 to 255) for the nodes" >&2
      return 1
    fi
    x=$(((x - 19) % 236 + 20))
  done
  echo "$x $n" >"$dir/net" || return 1
  net_x=$x
  net_nodes=$n
  ip addr add "10.213.$x.1/24" dev "pliant-br$x" && ip link set "pliant-br$x" up || return 1
  for ((k = 1; k <= n; k++)); do
    ns=pliant-$x-n$k
    ip netns add "$ns" &&
      ip link add "$ns" type veth peer name "${ns}p" &&
      ip link set "${ns}p" netns "$ns" &&
      ip link set "$ns" master "pliant-br$x" &&
      ip link set "$ns" up &&
      nsenter --net="/run/netns/$ns" ip addr add "10.213.$x.$((10 + k))/24" dev "${ns}p" &&
      nsenter --net="/run/netns/$ns" ip link set "${ns}p" up &&
      nsenter --net="/run/netns/$ns" ip link set lo up || return 1
  done
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

# Starts nodes n1..nN, each slurmd in its node's network namespace (entered with nsenter, not
# `ip netns exec`, which remounts /sys in a new mount namespace: slurmd then finds no
# /sys/fs/cgroup) and in a private mount namespace of its own, where DIR/jobs-nK is mounted
# over the job root JOBS.
start_nodes() {
  local n=$1 jobs=$2 k
  for ((k = 1; k <= n; k++)); do
    # nsenter and unshare exec (neither forks here), so $! ends as slurmd's pid. The inner
    # script's $1..$4 are its own arguments.
    # shellcheck disable=SC2016
    nsenter --net="/run/netns/pliant-$net_x-n$k" unshare --mount --propagation private \
      sh -c 'mount --bind "$1" "$2" && exec slurmd -D -f "$3" -N "$4"' sh \
      "$dir/jobs-n$k" "$jobs" "$dir/slurm.conf" "n$k" </dev/null >>"$dir/slurmd-n$k.out" 2>&1 &
    echo $! >"$dir/slurmd-n$k.pid"
  done
  wait_for "slurmd (nodes n1..n$n idle)" "$dir/slurmd-n1.log" bash -c \
    "[ \"\$(SLURM_CONF='$dir/slurm.conf' sinfo -h -N -o %T | grep -cx idle)\" = $n ]"
}

start() {
  [ "$(id -u)" = 0 ] || die "start needs root (the daemons run as root)"
  [ -n "${PLIANT_BIN:-}" ] || die "PLIANT_BIN must name the pliant binary"
  [ -x "$PLIANT_BIN" ] || die "PLIANT_BIN=$PLIANT_BIN is not an executable"
  local c n=${PLIANT_SLURM_NODES:-1}
  case $n in
  '' | *[!0-9]* | 0*) die "PLIANT_SLURM_NODES=$n: expected a node count from 1 to 200" ;;
  esac
  [ "$n" -le 200 ] || die "PLIANT_SLURM_NODES=$n: expected a node count from 1 to 200"
  for c in munged mungekey slurmctld slurmd sbatch scontrol; do
    command -v "$c" >/dev/null || die "$c is missing (packages: munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins)"
  done
  if [ "$n" -gt 1 ]; then
    for c in ip nsenter; do
      command -v "$c" >/dev/null || die "$c is missing (packages: iproute2 util-linux)"
    done
  fi
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

  # One node: on loopback, as it always was. Several: on the private bridge, each its own
  # spool, pid and log (slurmd expands %n to its node's name), each node claiming the machine.
  local what="a one-node test cluster, loopback only" ctld_addr=127.0.0.1
  local spool=$dir/spool d_pid=$dir/spool/slurmd.pid d_log=$dir/slurmd.log k
  local nodes_conf="NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN"
  local part_nodes=$node
  if [ "$n" -gt 1 ]; then
    if ! make_net "$n"; then
      stop
      die "the nodes' network could not be made"
    fi
    what="a $n-node test cluster on the private bridge pliant-br$net_x (10.213.$net_x.0/24)"
    ctld_addr=10.213.$net_x.1
    # Beside DIR/spool, not in it: the job's user runs its batch script from there, and
    # slurmd opens its spool to them (0755) but not the directory above it.
    spool=$dir/spool-%n
    d_pid=$dir/spool-%n/slurmd.pid
    d_log=$dir/slurmd-%n.log
    nodes_conf=
    for ((k = 1; k <= n; k++)); do
      nodes_conf="$nodes_conf${nodes_conf:+
}NodeName=n$k NodeAddr=10.213.$net_x.$((10 + k)) CPUs=$cpus RealMemory=$mem State=UNKNOWN"
      mkdir -p "$dir/spool-n$k" "$dir/jobs-n$k"
      chmod 0755 "$dir/spool-n$k"
      chmod 0755 "$dir/jobs-n$k"
    done
    part_nodes="n[1-$n]"
  fi

  cat >"$dir/slurm.conf" <<EOF
# Written by tools/slurm/cluster.sh: $what.
ClusterName=pliant
SlurmctldHost=$node($ctld_addr)
# root only because this is a throw-away cluster on one machine; a site uses its slurm user.
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$spool
SlurmctldPidFile=$dir/ctld/slurmctld.pid
SlurmdPidFile=$d_pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$d_log
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
$nodes_conf
PartitionName=debug Nodes=$part_nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
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
  local hook give_up="" decision="" addresses=""
  if [ -n "${PLIANT_BB_GIVE_UP_AFTER:-}" ]; then
    give_up="export PLIANT_BB_GIVE_UP_AFTER='$PLIANT_BB_GIVE_UP_AFTER'"
  fi
  if [ -n "${PLIANT_BB_DECISION_WAIT:-}" ]; then
    decision="export PLIANT_BB_DECISION_WAIT='$PLIANT_BB_DECISION_WAIT'"
  fi
  # A job's cache server on node k listens on, and is reached at, that node's own address.
  if [ "$n" -gt 1 ]; then
    # shellcheck disable=SC2016 # expanded by the hook, on the node
    addresses='case ${SLURMD_NODENAME:-} in'
    for ((k = 1; k <= n; k++)); do
      addresses="$addresses
n$k) export PLIANT_BB_LISTEN=10.213.$net_x.$((10 + k)) PLIANT_BB_ADVERTISE=10.213.$net_x.$((10 + k)) ;;"
    done
    addresses="$addresses
esac"
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
$addresses
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

  if [ "$n" -gt 1 ]; then
    start_nodes "$n" "$jobs"
    env_lines
    return
  fi
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
