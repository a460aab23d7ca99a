#!/usr/bin/env bash
# Distribution benchmarks (BENCHMARKS.md, "Plugins from OCI registries"):
#  1. cold pull of a large component from a loopback docker-registry
#     (fresh cache each round): wall time and the process's max RSS;
#  2. warm start of an `oci://` manifest (digest held in the cache) against
#     the same plugin from a local file, interleaved rounds, medians.
# Usage: host/benches/oci.sh DURASYNC EXAMPLE.wasm [SIZE_MIB] [ROUNDS]
set -euo pipefail
durasync=$1 example=$2 size_mib=${3:-18} rounds=${4:-15}
work=$(mktemp -d)
reg_pid=""
cleanup() { [ -n "$reg_pid" ] && kill "$reg_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/config.yml" <<YML
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $work/storage
http:
  addr: 127.0.0.1:$port
YML
docker-registry serve "$work/config.yml" >"$work/registry.log" 2>&1 &
reg_pid=$!
for _ in $(seq 200); do curl -fs "http://127.0.0.1:$port/v2/" >/dev/null && break; sleep 0.05; done
reg=127.0.0.1:$port

# 1. A large artifact laid out by hand (random bytes: a pull hashes and
# streams, it does not compile), pushed with skopeo.
python3 - "$work/layout" "$size_mib" <<'PY'
import hashlib, json, os, sys
d, mib = sys.argv[1], int(sys.argv[2])
os.makedirs(f"{d}/blobs/sha256")
def put(b):
    h = hashlib.sha256(b).hexdigest(); open(f"{d}/blobs/sha256/{h}", "wb").write(b); return h
layer = os.urandom(mib << 20); config = b"{}"
desc = lambda mt, b: {"mediaType": mt, "digest": "sha256:" + put(b), "size": len(b)}
m = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": desc("application/vnd.wasm.config.v0+json", config),
    "layers": [desc("application/wasm", layer)]}).encode()
mh = put(m)
open(f"{d}/oci-layout", "w").write('{"imageLayoutVersion":"1.0.0"}')
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
    "digest": "sha256:" + mh, "size": len(m), "annotations": {"org.opencontainers.image.ref.name": "big"}}]},
    open(f"{d}/index.json", "w"))
PY
echo '{"default":[{"type":"insecureAcceptAnything"}]}' >"$work/policy.json"
skopeo --policy "$work/policy.json" copy -q --preserve-digests --dest-tls-verify=false \
    "oci:$work/layout:big" "docker://$reg/bench/big:big"
echo "cold pull of a ${size_mib} MiB component (fresh cache each round): seconds, max RSS KiB"
for i in $(seq 7); do
    rm -rf "$work/cold"
    /usr/bin/time -f "%e %M" -o "$work/t" env XDG_CACHE_HOME="$work/cold" "$durasync" pull "oci://$reg/bench/big:big" >/dev/null
    cat "$work/t"
done | sort -n | tee "$work/cold.txt"
echo "median: $(sed -n 4p "$work/cold.txt")"

# 2. Warm start: the example plugin from a file and from the registry.
digest=$("$durasync" push "$example" "oci://$reg/bench/example:1" | sed -n 's/^manifest digest: //p')
sha=$(sha256sum "$example" | cut -d' ' -f1)
mkdir -p "$work/out"
cp "$example" "$work/example.wasm"
printf 'A=1\n' >"$work/input"
common=$'[roots.out]\npath = "out"\naccess = "rw"\n'
printf 'name = "example"\nwasm = "example.wasm"\nsha256 = "%s"\n%s' "$sha" "$common" >"$work/file.toml"
printf 'name = "example"\nwasm = "oci://%s/bench/example@%s"\n%s' "$reg" "$digest" "$common" >"$work/oci.toml"
export XDG_CACHE_HOME="$work/warm"
for m in file oci; do "$durasync" run "$work/$m.toml" --input "$work/input" >/dev/null; done
: >"$work/file.ms"; : >"$work/oci.ms"
for i in $(seq "$rounds"); do
    order="file oci"; [ $((i % 2)) -eq 0 ] && order="oci file"
    for m in $order; do
        s=$(date +%s%N); "$durasync" run "$work/$m.toml" --input "$work/input" >/dev/null; e=$(date +%s%N)
        echo $(((e - s) / 1000)) >>"$work/$m.ms"
    done
done
med() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
f=$(med "$work/file.ms"); o=$(med "$work/oci.ms")
echo "warm run, median of $rounds interleaved: file ${f} us, oci:// (digest, from cache) ${o} us, ratio $(python3 -c "print(round($o/$f, 3))")"
echo "spread file: $(sort -n "$work/file.ms" | head -1)..$(sort -n "$work/file.ms" | tail -1) us; oci: $(sort -n "$work/oci.ms" | head -1)..$(sort -n "$work/oci.ms" | tail -1) us"
