# shellcheck shell=bash disable=SC2034  # py is for the script that sources this
# Sourced by the scripts that drive a node or cluster with real Redis clients (tools/compat/*.sh,
# tools/bench/rescale_cycles.sh): one way to get redis-cli and redis-py.
#
#   need_apt PACKAGE COMMAND   installs PACKAGE with apt-get (as root) unless COMMAND exists, or
#                              names it and stops
#   need_redis_py              redis-cli, and redis-py in the virtual environment
#                              target/compat-venv; sets py to its python

need_apt() {
  command -v "$2" >/dev/null && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
  else
    echo "$(basename "$0"): needs $2 (Debian package $1)" >&2
    exit 1
  fi
}

need_redis_py() {
  need_apt redis-tools redis-cli
  local venv=target/compat-venv
  if [ ! -x "$venv/bin/python" ]; then
    if ! python3 -m venv "$venv" 2>/dev/null; then
      # Debian splits venv (ensurepip) into python3-venv; a half-made directory would fail again.
      rm -rf "$venv"
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      else
        echo "$(basename "$0"): needs python3's venv module (Debian package python3-venv)" >&2
        exit 1
      fi
      python3 -m venv "$venv"
    fi
  fi
  "$venv/bin/python" -c 'import redis' 2>/dev/null || "$venv/bin/pip" install -q 'redis>=5,<7'
  py=$venv/bin/python
}
