#!/usr/bin/env bash
# Shows that the golden miss counts (crates/cache/tests/golden.rs, libCacheSim's own counts) catch
# a wrong algorithm: breaks one rule at a time in a scratch copy of the committed code, runs the
# golden test there, and prints how many of its miss counts then differ from libCacheSim's.
#
#   tools/golden/mutations.sh        # about a minute once the dependencies are built
#
# The working tree is never touched: the copy is `git archive HEAD` in a temporary directory.
# It builds in `mutations/` under $CARGO_TARGET_DIR (else target/), never in the checkout's own
# build directory: cargo names a workspace crate's artifacts by its path inside the workspace,
# so the copy's mutated pliant-cache would replace the checkout's and look fresh to it (a later
# `cargo test` there would run the mutated algorithm). Later runs reuse the dependencies' builds;
# `tar -m` dates the copy's files now, so each run rebuilds the workspace's crates from them.
set -euo pipefail
cd "$(dirname "$0")/../.."

work=$(mktemp -d "${TMPDIR:-/tmp}/pliant-mutations.XXXXXX")
trap 'rm -rf "$work"' EXIT
git archive HEAD | tar -x -m -C "$work"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/mutations"

# label|file|exact text|replacement (no | inside a field)
mutations=(
  "none (the code as committed)|crates/cache/src/s3fifo.rs|freq(n.meta) >= self.threshold|freq(n.meta) >= self.threshold"
  "S3-FIFO: the move-to-main threshold read as > instead of >=|crates/cache/src/s3fifo.rs|freq(n.meta) >= self.threshold|freq(n.meta) > self.threshold"
  "ARC: REPLACE's tie rule dropped (T1 holding exactly p no longer evicts from T1 after a B2 ghost hit)|crates/cache/src/arc.rs|let cond3 = t1 == self.p && self.in_b2;|let cond3 = false;"
  "ARC: REPLACE's tie rule without its flag (T1 holding exactly p always evicts from T1)|crates/cache/src/arc.rs|let cond3 = t1 == self.p && self.in_b2;|let cond3 = t1 == self.p;"
)

total=$(python3 -c 'import json,sys; print(sum(len(t["runs"]) for t in json.load(open(sys.argv[1]))["traces"].values()))' \
  "$work/crates/cache/tests/data/golden.json")

for m in "${mutations[@]}"; do
  IFS='|' read -r label file from to <<<"$m"
  cp "$work/$file" "$work/$file.orig"
  python3 - "$work/$file" "$from" "$to" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"{path}: {old!r} found {text.count(old)} times; the mutation no longer applies")
open(path, "w").write(text.replace(old, new))
PY
  out=$(cargo test --quiet --locked --manifest-path "$work/Cargo.toml" -p pliant-cache \
    --test integration -- golden::miss_counts_match_libcachesim_exactly 2>&1 || true)
  mv "$work/$file.orig" "$work/$file"
  if grep -q "test result: ok" <<<"$out"; then
    n=0
  else
    n=$(grep -oE '^[0-9]+ mismatches' <<<"$out" | grep -oE '^[0-9]+' || true)
    if [ -z "$n" ]; then
      echo "$out" >&2
      echo "tools/golden/mutations.sh: the golden test failed without counting mismatches" >&2
      exit 1
    fi
  fi
  echo "$label: $n of $total miss counts differ from libCacheSim's"
done
