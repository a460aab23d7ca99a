#!/usr/bin/env bash
# The main job. Until the certsync plugin lands this is the native sync.
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release -p durasync --quiet
rm -rf demo && mkdir -p demo/src/secrets demo/target
printf 'cert\n' > demo/src/secrets/tls.crt
printf 'key\n' > demo/src/secrets/tls.key && chmod 600 demo/src/secrets/tls.key
target/release/durasync sync demo/target/certs --from demo/src
find demo/target -printf '%M %p\n'
