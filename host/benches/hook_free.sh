#!/usr/bin/env bash
# A sync with no probe, no drift watch and no HTTP action must cost what it
# did: two durasync binaries (BEFORE, AFTER) on the hook-free paths, in one
# run, interleaved where the harness allows it.
#
#   host/benches/hook_free.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]
#
# 1. `durasync sync --from` (the native core): an unchanged check, a full
#    replace and a one-file change of 1000 x 4 KiB files, `--flush fsync`
#    (host/benches/before_after.py, order alternating each round);
# 2. a warm one-shot `durasync run` of certsync on its example List, no hooks
#    in the manifest (host/benches/warm_run.py, order alternating);
# 3. the agent benchmark (tests/agent/bench.rs: input change -> on disk,
#    warm unchanged reconcile, RSS, idle CPU) for BEFORE, AFTER, AFTER,
#    BEFORE, unless AGENT=0 (each ~2 min: it idles 60 s for the CPU figure).
#
# Give both binaries the same build profile (two release builds, or two
# debug builds). Run from the repository root; the certsync component must
# be built (./demo.sh or any agent test). A BEFORE == AFTER run shows the
# machine's noise. Scratch lives in target/hook-free-bench (removed at the end).
set -euo pipefail
before=$(realpath "$1")
after=$(realpath "$2")
rounds=${3:-20}
root=$(pwd)
scratch="$root/target/hook-free-bench"
rm -rf "$scratch"
mkdir -p "$scratch"
trap 'rm -rf "$scratch"' EXIT

echo "# $(date -u +%FT%TZ) $(uptime)"
echo "# before: $before ($("$before" --version))"
echo "# after:  $after ($("$after" --version))"

echo "## 1. durasync sync --from, 1000 x 4 KiB, --flush fsync"
python3 host/benches/before_after.py "$before" "$after" "$scratch/sync" "$rounds" "--flush fsync"

echo "## 2. warm durasync run, certsync example, no hooks"
wasm="$root/target/wasm/wasm32-wasip2/release/certsync.wasm"
[ -f "$wasm" ] || { echo "build certsync first (./demo.sh)" >&2; exit 2; }
mkdir -p "$scratch/certs"
sed -e "s#^wasm = .*#wasm = \"$wasm\"#" -e "s#^path = .*#path = \"$scratch/certs\"#" \
    plugins/certsync/plugin.toml >"$scratch/certsync.toml"
XDG_CACHE_HOME="$scratch/cache" python3 host/benches/warm_run.py "$before" "$after" \
    "$scratch/certsync.toml" plugins/certsync/example/list.json "$rounds"

if [ "${AGENT:-1}" != 0 ]; then
    echo "## 3. the agent benchmark (tests/agent/bench.rs), before / after / after / before"
    for which in before after after before; do
        bin=$before
        [ "$which" = after ] && bin=$after
        echo "### $which"
        DURASYNC_BENCH_BIN="$bin" cargo test -q -p durasync --test agent -- --ignored --nocapture \
            agent_benchmark 2>&1 | grep -E 'median|one-shot|RSS|idle CPU|load at' || true
    done
fi
echo "# $(date -u +%FT%TZ) $(uptime)"
