# Sourced by the file-cache benchmarks (tools/bench/fs_fio.sh, fs_tree.sh, fs_write.sh): a size
# on the command line, and the clean-up of a `pliant fs` mount by its own daemon's pid.
#
#   size_mib SIZE     MiB in 1GiB / 512MiB / 2G / 512M / 512; exits 2 on anything else
#   wait_gone PID S   0 once PID has exited, 1 if it is still there after S seconds
#   stop_fs_mount     unmounts $MNT with `$BIN fs unmount --discard` (dirty data discarded),
#                     stops $DAEMON_PID if it still runs, and detaches $MNT if still mounted
#   clean_up_on_exit  at exit (Ctrl-C included: status 130), stop_fs_mount and remove $WORK,
#                     keeping the script's exit status
#   bench_setup NAME SIZE_MIB TOOL…
#                     a benchmark's start: BIN (PLIANT_BIN, else target/release/pliant, not
#                     built here) and HELP (fs_fio.py) as real paths; TOOL… on the PATH; root;
#                     $OUT/logs made and OUT made real; WORK a fresh directory under WORK_BASE
#                     (default /var/tmp, a local disk) with room for 2 × SIZE_MIB + 512 MiB;
#                     DAEMON_PID empty and clean_up_on_exit set. NAME prefixes its errors.

size_mib() {
    local s=${1^^}
    s=${s%IB}; s=${s%B}
    case $s in
        *G) echo $(( ${s%G} * 1024 )) ;;
        *M) echo "${s%M}" ;;
        *[!0-9]* | "") echo "bad size: $1" >&2; exit 2 ;;
        *) echo "$s" ;;
    esac
}

wait_gone() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    return 1
}

stop_fs_mount() {
    if mountpoint -q "$MNT"; then
        echo "cleanup: unmounting $MNT (dirty data discarded)" >&2
        timeout 60 "$BIN" fs unmount --discard "$MNT" >/dev/null 2>&1 || umount -l "$MNT"
    fi
    if [ -n "${DAEMON_PID:-}" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -TERM "$DAEMON_PID"; wait_gone "$DAEMON_PID" 20 || kill -KILL "$DAEMON_PID"
    fi
    if mountpoint -q "$MNT"; then umount -l "$MNT"; fi
}

clean_up_on_exit() {
    trap '_fs_mount_exit' EXIT
    trap 'exit 130' INT TERM
}

_fs_mount_exit() {
    local rc=$?
    set +e
    stop_fs_mount
    rm -rf "$WORK"
    exit $rc
}

bench_setup() {
    local name=$1 size=$2 t free; shift 2
    BIN=${PLIANT_BIN:-target/release/pliant}
    [ -x "$BIN" ] || { echo "$name: no $BIN (cargo build --release, or set PLIANT_BIN)" >&2; exit 1; }
    BIN=$(realpath "$BIN")
    HELP=$(realpath tools/bench/fs_fio.py)
    for t in "$@"; do
        command -v "$t" >/dev/null || { echo "$name: needs $t" >&2; exit 1; }
    done
    [ "$(id -u)" = 0 ] || { echo "$name: needs root (drop_caches, FUSE mounts)" >&2; exit 1; }
    mkdir -p "$OUT/logs"
    OUT=$(realpath "$OUT")
    WORK=$(mktemp -d "${WORK_BASE:-/var/tmp}/${name%.sh}.XXXXXX")
    # A run holds the file and, through a mount, its cached copy too (fio's JSON is empty when
    # the disk fills: a summary would fail on it).
    free=$(df -Pm "$WORK" | awk 'NR == 2 { print $4 }')
    [ "$free" -gt $((size * 2 + 512)) ] || {
        echo "$name: ${free} MiB free under $WORK, a run needs $((size * 2 + 512))" >&2
        rm -rf "$WORK"; exit 1
    }
    DAEMON_PID=
    clean_up_on_exit
}
