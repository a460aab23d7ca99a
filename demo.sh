#!/usr/bin/env bash
# The main job, on a fresh machine, in one command: build the durasync host
# and the certsync plugin (wasm32-wasip2), then run the agent once on the
# bundled config directory (contrib/agent.d: certsync on the example List,
# what `kubectl get configmaps,secrets -o json` prints) into demo/certs, and
# show the tree it wrote: paths, modes, sizes. On a node the same agent runs
# continuously (contrib/systemd, contrib/kubernetes).
set -euo pipefail
cd "$(dirname "$0")"
root=$PWD

# The pinned toolchain and its wasm32-wasip2 target (rust-toolchain.toml);
# rustup installs both on first use.
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true

echo "== building the host (cargo build -p durasync)"
cargo build --quiet --locked -p durasync

echo "== building the certsync plugin for wasm32-wasip2"
# The same flags as tests/support/src/wasm.rs: embedded paths are remapped so the
# component is byte-identical on every machine and matches the sha256 pinned
# in plugins/certsync/plugin.toml.
CARGO_ENCODED_RUSTFLAGS="--remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"$'\x1f'"--remap-path-prefix=$root=/durasync" \
    cargo build --quiet --locked --release --target wasm32-wasip2 -p certsync --target-dir target/wasm
wasm=target/wasm/wasm32-wasip2/release/certsync.wasm
echo "   $wasm: $(stat -c %s "$wasm") bytes, sha256 $(sha256sum "$wasm" | cut -d' ' -f1)"

rm -rf demo
mkdir -p demo/certs
durasync=target/debug/durasync
config=contrib/agent.d

echo "== durasync agent --config-dir $config --once   (certsync: root certs = demo/certs)"
DURASYNC_LOG=${DURASYNC_LOG:-info} "$durasync" agent --config-dir "$config" --once

echo
echo "== the same again: nothing changed, nothing is written"
DURASYNC_LOG=warn "$durasync" agent --config-dir "$config" --once

echo
echo "== the tree certsync wrote (mode, bytes, path)"
find demo/certs -mindepth 1 -not -name .durasync.lock -printf '%M %6s  %P\n' | sort -k3
