#!/usr/bin/env bash
# Distribution benchmarks (BENCHMARKS.md, "Plugins from OCI registries"):
#  1. cold pull of a large component from a loopback docker-registry
#     (fresh cache each round): wall time and the process's max RSS;
#  2. warm start of an `oci://` manifest (digest held in the cache) against
#     the same plugin from a local file, interleaved rounds, medians;
#  3. with TLS=1 (root): the cold pull again from a registry with TLS from a
#     test CA (openssl), on 192.0.2.1 in a private network namespace (a
#     loopback registry is always plain HTTP), pulled with --registry-ca.
# Usage: [BIG_WASM=FILE] [TLS=1] host/benches/oci.sh DURASYNC EXAMPLE.wasm [SIZE_MIB] [ROUNDS]
# BIG_WASM: the cold pull's component (e.g. the 18 MB Python example);
# without it, SIZE_MIB of random bytes.
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
python3 - "$work/layout" "$size_mib" "${BIG_WASM:-}" <<'PY'
import hashlib, json, os, sys
d, mib, big = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.makedirs(f"{d}/blobs/sha256")
def put(b):
    h = hashlib.sha256(b).hexdigest(); open(f"{d}/blobs/sha256/{h}", "wb").write(b); return h
layer = open(big, "rb").read() if big else os.urandom(mib << 20); config = b"{}"
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
what=${BIG_WASM:+$(basename "$BIG_WASM"), $(($(stat -c %s "$BIG_WASM") >> 20)) MiB}
echo "cold pull of ${what:-${size_mib} MiB of random bytes} (fresh cache each round): seconds, max RSS KiB"
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

# 3. The cold pull over TLS (root: a private network namespace).
[ "${TLS:-0}" = 1 ] || exit 0
tls=$work/tls
mkdir -p "$tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=bench CA" -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=192.0.2.1" \
    -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
printf 'subjectAltName=IP:192.0.2.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$tls/ext"
openssl x509 -req -days 2 -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
    -extfile "$tls/ext" -out "$tls/server.pem" 2>/dev/null
cat >"$tls/config.yml" <<YML
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $tls/storage
http:
  addr: 192.0.2.1:5443
  tls:
    certificate: $tls/server.pem
    key: $tls/server.key
YML
# The namespace, its registry and every pull end with this command.
unshare --net env work="$work" durasync="$durasync" bash -euo pipefail -c '
ip link set lo up; ip addr add 192.0.2.1/32 dev lo
docker-registry serve "$work/tls/config.yml" >"$work/tls/registry.log" 2>&1 &
trap "kill $! 2>/dev/null" EXIT
for _ in $(seq 200); do (exec 3<>/dev/tcp/192.0.2.1/5443) 2>/dev/null && break; sleep 0.05; done
skopeo --policy "$work/policy.json" copy -q --preserve-digests --dest-tls-verify=false \
    "oci:$work/layout:big" "docker://192.0.2.1:5443/bench/big:big"
echo "cold pull over TLS (test CA via --registry-ca), fresh cache each round: seconds, max RSS KiB"
for i in $(seq 7); do
    rm -rf "$work/cold-tls"
    /usr/bin/time -f "%e %M" -o "$work/t" env XDG_CACHE_HOME="$work/cold-tls" "$durasync" pull \
        --registry-ca "$work/tls/ca.pem" "oci://192.0.2.1:5443/bench/big:big" >/dev/null
    cat "$work/t"
done | sort -n | tee "$work/cold-tls.txt"
echo "median: $(sed -n 4p "$work/cold-tls.txt")"
'
