#!/bin/sh
# The node's side of Pliant's burst buffer: slurmd runs it as root, as Slurm's Prolog
# (`node.sh prolog`) and Epilog (`node.sh epilog`), with SLURM_JOB_ID and SLURM_JOB_UID in
# its environment, in slurmd's mount namespace: the mount it makes is the
# compute node's, and the job's processes see it.
#
# The controller's burst_buffer.lua (slurm_bb_data_in) leaves a job's batch script in
# $PLIANT_BB_STATE_DIR/<job id>/job.sh; a job without one asks for no cache and is left alone.
# The Prolog mounts the job's cache for the job's user and preloads, and says so
# ("mounted.<node>");
# the Epilog waits for the controller's word ("want": stage-out, or discard after scancel
# --hurry), writes back (or discards) and unmounts, and leaves the outcome in
# $PLIANT_BB_STATE_DIR/<job id>/stage-out.<node>, which the controller waits for. Both exit 0
# unless the node itself cannot set up a cache (Slurm drains a node whose Prolog or Epilog
# fails): a job whose own script is at fault runs without its cache, and a failed write-back
# is reported by the controller as a stage-out failure.
#
# Environment: PLIANT_BIN (default: pliant in PATH), PLIANT_BB_STATE_DIR (default
# /var/spool/pliant/slurm-bb), PLIANT_JOB_ROOT (where mounts go; pliant's default otherwise),
# PLIANT_BB_GIVE_UP_AFTER (seconds of failing write-back before the Epilog gives up),
# PLIANT_BB_DECISION_WAIT (seconds the Epilog waits for the controller's word; default 600),
# PLIANT_BB_LISTEN (what a node's cache server listens on, for a job on several nodes; default
# 0.0.0.0), PLIANT_BB_ADVERTISE (the address other nodes reach it at; default the node's name).
set -u
pliant=${PLIANT_BIN:-pliant}
state=${PLIANT_BB_STATE_DIR:-/var/spool/pliant/slurm-bb}
id=${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run by slurmd as Prolog or Epilog}
case $id in
*[!0-9]*) echo "node.sh: unexpected job id $id" >&2; exit 1 ;;
esac
# Each node of a job has its own files in the hand-over directory: a job on several nodes has a
# cache on each, and the controller waits for every one that mounted.
node=${SLURMD_NODENAME:-$(hostname -s)}
case $node in
'' | *[!A-Za-z0-9._-]*) echo "node.sh: unexpected node name $node" >&2; exit 1 ;;
esac
job=$state/$id

# Writes stdin to $job/$1. The hand-over directory is SlurmUser's, and this runs as root: never
# through a name someone may have put a link at. mktemp makes a new file (O_EXCL), and the
# rename replaces whatever is at the name, a link included, without following it.
put() {
  tmp=$(mktemp "$job/.put.XXXXXX" 2>/dev/null) || return 1
  # Readable by the controller, which may run as a SlurmUser other than root.
  cat >"$tmp" && chmod 644 "$tmp" && mv -f "$tmp" "$job/$1"
}

case ${1:-} in
prolog)
  [ -f "$job/job.sh" ] || exit 0
  # A job on several nodes gets one cache striped across all of them (DataWarp's
  # access_mode=striped): each node's setup starts a cache server on the node, leaves its
  # address in the hand-over directory (which only SlurmUser may write), waits for every
  # node's, and mounts over all of them. A job on one node keeps the node's own cache.
  nodes=${SLURM_JOB_NUM_NODES:-1}
  case $nodes in
  '' | *[!0-9]*) echo "node.sh: unexpected SLURM_JOB_NUM_NODES $nodes" >&2; exit 1 ;;
  esac
  set --
  if [ "$nodes" -gt 1 ]; then
    set -- --rendezvous "$job" --nodes "$nodes" --node "$node" \
      --listen "${PLIANT_BB_LISTEN:-0.0.0.0}" --advertise "${PLIANT_BB_ADVERTISE:-$node}"
  fi
  out=$("$pliant" job setup "$job/job.sh" --job-id "$id" --uid "${SLURM_JOB_UID:?}" "$@" 2>&1)
  status=$?
  if [ "$status" -ne 0 ]; then
    echo "$out" | put "setup.err.$node"
    echo "node.sh: pliant job setup for job $id failed: $out" >&2
    # Slurm drains a node whose Prolog fails. Exit status 3 says the job's own script is at
    # fault (its directives, or a pfs or preload path its user removed or made a link since
    # sbatch): the job goes on without its cache (its $DW_JOB_STRIPED_CACHE does not exist) and
    # the node stays in service. Anything else (FUSE, the binary, the disk) is the node's.
    [ "$status" -eq 3 ] && exit 0
    exit 1
  fi
  # A hurried teardown (scancel --hurry while this set up or preloaded) may have removed the
  # hand-over directory, or asked for a discard, before this could say it mounted: the job will
  # not run, and the cache comes down here rather than stay mounted. (Writing `mounted` into a
  # directory that is gone would fail this Prolog, and Slurm drains a node whose Prolog fails.)
  if put "mounted.$node" </dev/null && [ "$(cat "$job/want" 2>/dev/null)" != discard ]; then
    exit 0
  fi
  "$pliant" job teardown --job-id "$id" --discard >/dev/null 2>&1 ||
    echo "node.sh: job $id was cancelled while its cache was set up; taking it down failed" >&2
  exit 0
  ;;
epilog)
  if [ ! -f "$job/job.sh" ]; then
    # No hand-over (a job without a cache, or one whose teardown the controller has finished):
    # whatever of this job is still mounted here (a Prolog that lost a race with a hurried
    # teardown) goes, written back rather than discarded, since no one said to drop it. Nothing
    # there is fine.
    "$pliant" job teardown --job-id "$id" >/dev/null 2>&1 || true
    exit 0
  fi
  # The controller says whether the job's data is wanted: its slurm_bb_data_out asks for
  # stage-out, a hurried slurm_bb_job_teardown (scancel --hurry) for a discard. Without a word
  # in PLIANT_BB_DECISION_WAIT seconds (the controller down), the data is kept: written back.
  discard=
  if [ -f "$job/mounted.$node" ]; then
    i=0
    limit=$((${PLIANT_BB_DECISION_WAIT:-600} * 5))
    while [ ! -f "$job/want" ] && [ "$i" -lt "$limit" ]; do
      sleep 0.2
      i=$((i + 1))
    done
    case $(cat "$job/want" 2>/dev/null) in
    discard*) discard=--discard ;;
    esac
  fi
  # The outcome goes in atomically: the controller reads it as soon as it appears.
  # A write-back that keeps failing gives up after PLIANT_BB_GIVE_UP_AFTER seconds (pliant's
  # default otherwise), leaving the cache mounted with its data for an administrator.
  # $discard is empty or one word.
  # shellcheck disable=SC2086
  if out=$("$pliant" job teardown --job-id "$id" $discard \
    ${PLIANT_BB_GIVE_UP_AFTER:+--give-up-after "$PLIANT_BB_GIVE_UP_AFTER"} 2>&1); then
    printf 'ok\n%s\n' "$out" | put "stage-out.$node"
  else
    printf 'failed\n%s\n' "$out" | put "stage-out.$node"
  fi
  ;;
*)
  echo "usage: node.sh prolog|epilog" >&2
  exit 2
  ;;
esac
exit 0
