# Sourced by the scripts that run a `pliant serve` node (tools/bench/replay_vs_sim.sh,
# tools/compat/clients.sh): one way to start a node on a free loopback port and stop it by its pid.
#
#   start_node BIN LOG ARGS…   starts `BIN serve --bind 127.0.0.1:0 ARGS…` with stderr in LOG and
#                              waits (at most 30 s) for its address: sets node_pid, node_addr
#                              (127.0.0.1:PORT) and node_port
#   stop_node                  SIGTERM to node_pid, and waits for it

start_node() {
  local bin=$1 log=$2
  shift 2
  # The log exists before the node's shell opens it: the loop below would otherwise race the
  # background redirection, and a sed that cannot read the file ends a script under `set -e`.
  : >"$log"
  "$bin" serve --bind 127.0.0.1:0 "$@" 2>"$log" &
  node_pid=$!
  node_addr=
  for _ in $(seq 1 300); do
    # The address ends at the space before the settings: a line read while the node is still
    # writing it ("listening on 127.0.") must not pass for one (unbuffered stderr writes the
    # line in pieces; the scan unit of tools/compat/redis_suite.sh got port "127.0.").
    node_addr=$(sed -n 's/^pliant serve: listening on \([^ ]*\) .*/\1/p' "$log")
    [ -n "$node_addr" ] && break
    sleep 0.1
  done
  if [ -z "$node_addr" ]; then
    echo "$(basename "$0"): the node did not start: $(cat "$log")" >&2
    exit 1
  fi
  node_port=${node_addr##*:}
}

stop_node() {
  if [ -n "${node_pid:-}" ]; then
    kill "$node_pid" 2>/dev/null || true
    wait "$node_pid" 2>/dev/null || true
    node_pid=
  fi
}
