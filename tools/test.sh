#!/usr/bin/env bash
# The test command of the README. On a fresh machine it needs only Rust and a C compiler; it
# first checks that this stays so, then runs the whole suite.
#
#   tools/test.sh                  # default features: what a user builds
#   tools/test.sh --all-features   # CI: also the opt-in features (e.g. `exact`, which builds HiGHS)
#
# Extra arguments go to `cargo test`. System packages that an opt-in feature needs are installed
# when missing (as root, with apt-get), or named before the script stops.
set -euo pipefail
cd "$(dirname "$0")/.."

all_features=false
for arg in "$@"; do
  [ "$arg" = "--all-features" ] && all_features=true
done

need() { # need PACKAGE TEST-COMMAND: install PACKAGE with apt-get if TEST-COMMAND fails
  local pkg=$1; shift
  if ! "$@" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "tools/test.sh: installing $pkg" >&2
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
    else
      echo "tools/test.sh: the opt-in features need the system package $pkg; install it and run again" >&2
      exit 1
    fi
  fi
}

# The default build must need nothing beyond Rust and a C compiler: no bindgen (libclang), no
# cmake, no protoc. They may appear only behind opt-in features.
native=$(cargo tree --workspace -e normal,build --prefix none --locked 2>/dev/null \
  | grep -E '^(bindgen|cmake|prost-build|protobuf-src) ' | sort -u || true)
if [ -n "$native" ]; then
  echo "tools/test.sh: the default build depends on a crate that needs system tools:" >&2
  echo "$native" >&2
  echo "put it behind an opt-in cargo feature" >&2
  exit 1
fi

# `pliant fs` tests mount real FUSE file systems: /dev/fuse, and fusermount3 (package fuse3)
# for an unprivileged mount; their mmap and fcntl checks run python3, and the two-user tests
# the system's /usr/bin/python3 as another user (a per-user python, e.g. pyenv's under /root,
# is out of that user's reach).
need fuse3 command -v fusermount3
need python3 test -x /usr/bin/python3
# The Slurm test (crates/pliant/tests/slurm_cli.rs) runs a one-node cluster of Debian's Slurm
# 22.05 with its own munged (tools/slurm/cluster.sh): the burst_buffer/lua plugin is in
# slurm-wlm-basic-plugins.
need munge command -v munged
need slurmctld command -v slurmctld
need slurmd command -v slurmd
need slurm-client command -v sbatch
need slurm-wlm-basic-plugins bash -c "compgen -G '/usr/lib/*/slurm-wlm/burst_buffer_lua.so'"
# Its three-node cluster gives each slurmd a network namespace of its own on a private bridge.
need iproute2 command -v ip
need util-linux command -v nsenter
if [ ! -e /dev/fuse ]; then
  if [ -n "${CI:-}" ]; then
    echo "tools/test.sh: /dev/fuse is missing: the pliant fs tests need FUSE (a container needs --device /dev/fuse)" >&2
    exit 1
  fi
  echo "tools/test.sh: no /dev/fuse here: the pliant fs mount tests will skip" >&2
fi

# The rescale test (crates/pliant/tests/rescale_scale_cli.rs) runs tools/bench/rescale_scale.sh,
# which measures a real Redis beside the cluster: redis-server (redis-tools has only the clients).
need redis-server command -v redis-server
# The serve tests drive a node with real clients: redis-cli, and redis-py in target/compat-venv
# (the same environment tools/compat/*.sh use), made here so a clean clone's first run has it.
# shellcheck source=tools/lib/clients.sh
. tools/lib/clients.sh
need_redis_py

if $all_features; then
  # `exact` builds HiGHS from source: cmake, and libclang for its generated bindings.
  need cmake command -v cmake
  # libclang itself (libclang.so*, libclang-14.so*), not libclang-cpp, which bindgen cannot use:
  # matching that one left HiGHS's build to fail later with "Unable to find libclang".
  need libclang-dev bash -c "compgen -G '/usr/lib/llvm-*/lib/libclang.so*' || compgen -G '/usr/lib/*/libclang-[0-9]*.so*'"
  # `etcd`: the etcd client's gRPC code is generated with protoc; its tests start etcd.
  need protobuf-compiler command -v protoc
  need etcd-server command -v etcd
fi

# A test that skips its checks (the data in ../shared missing, outside CI) appends one line to
# this file (pliant_testdata::skip), since the test harness hides what a passing test prints.
skips=$(mktemp "${TMPDIR:-/tmp}/pliant-skips.XXXXXX")
trap 'rm -f "$skips"' EXIT
export PLIANT_SKIP_LOG=$skips

# PKG_CONFIG=false makes every pkg-config probe fail, so a build script that quietly links a
# system library instead of building its vendored copy breaks here rather than on a user's machine.
status=0
PKG_CONFIG=false cargo test --workspace --locked "$@" || status=$?

# What was skipped, and why: one line a skip (a test skipping checks of two missing files
# records two; the fs tests record theirs without /dev/fuse). The exit status stays cargo test's.
n=$(wc -l <"$skips")
if [ "$n" -eq 0 ]; then
  echo "tools/test.sh: no test skipped its checks"
else
  echo "tools/test.sh: $n skips (their tests passed without these checks):"
  sed 's/^/  /' "$skips"
fi
exit "$status"
