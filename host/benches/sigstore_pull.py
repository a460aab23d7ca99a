#!/usr/bin/env python3
"""Cold pull + verify of a large plugin: keyless (a Sigstore bundle found
through the referrers tag schema) against a cosign key (the `.sig` tag
scheme), in the same run.

A docker-registry on 127.0.0.1 holds the same component in two
repositories: `bench/key` signed with an openssl P-256 key as cosign signs
(a simple-signing payload in the `sha256-<hex>.sig` tag), `bench/keyless`
with a bundle made by the Sigstore JavaScript stack against its mock
Fulcio and Rekor (`tests/oci/sigstore_js/sign.js`; a v0.2 message
signature with a certificate chain, a Rekor entry with an inclusion proof,
checkpoint and signed entry timestamp) attached as a referrer (the
registry has no referrers API: durasync asks it, gets 404, and reads the
`sha256-<hex>` index tag). Each round runs `durasync pull` of each, in
alternating order, each into an empty cache directory (nothing is
compiled by a pull); the figure is the wall time of the whole process.

Usage: sigstore_pull.py DURASYNC SIGN_JS [--wasm FILE] [--rounds N]
  SIGN_JS: the signer installed by the oci tests
  (target/lang-tools/sigstore-js-*/sign.js, its node_modules beside it).
  --wasm: the component (e.g. the 18 MB Python example); default 18 MiB
  of random bytes.
"""

import argparse
import base64
import hashlib
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
WORKFLOW = "https://github.com/vendor/plugins/.github/workflows/release.yml@refs/tags/v1.4"
GITHUB = "https://token.actions.githubusercontent.com"


def digest(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def request(method, url, data=None, headers=None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    with urllib.request.urlopen(req) as r:
        return r.status, dict(r.headers), r.read()


def upload(reg, repo, blob):
    _, h, _ = request("POST", f"http://{reg}/v2/{repo}/blobs/uploads/")
    loc = h["Location"]
    if loc.startswith("/"):
        loc = f"http://{reg}{loc}"
    sep = "&" if "?" in loc else "?"
    request("PUT", f"{loc}{sep}digest={digest(blob)}", blob, {"Content-Type": "application/octet-stream"})


def put_manifest(reg, repo, ref, media_type, body):
    request("PUT", f"http://{reg}/v2/{repo}/manifests/{ref}", body, {"Content-Type": media_type})


def desc(media_type, b, **extra):
    return {"mediaType": media_type, "digest": digest(b), "size": len(b), **extra}


def push_plugin(reg, repo, wasm):
    config = b"{}"
    upload(reg, repo, config)
    upload(reg, repo, wasm)
    m = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": desc("application/vnd.wasm.config.v0+json", config),
        "layers": [desc("application/wasm", wasm)],
    }).encode()
    put_manifest(reg, repo, "v1", OCI_MANIFEST, m)
    return m


def sign_with_key(reg, repo, work, d):
    key, pub = f"{work}/cosign.key", f"{work}/cosign.pub"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key], check=True)
    subprocess.run(["openssl", "ec", "-in", key, "-pubout", "-out", pub], check=True, capture_output=True)
    payload = json.dumps({
        "critical": {"identity": {"docker-reference": f"{reg}/{repo}"},
                     "image": {"docker-manifest-digest": d},
                     "type": "cosign container image signature"},
        "optional": None,
    }).encode()
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key], input=payload, check=True,
                         capture_output=True).stdout
    config = json.dumps({"architecture": "", "os": "", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [digest(payload)]}}).encode()
    upload(reg, repo, config)
    upload(reg, repo, payload)
    layer = desc("application/vnd.dev.cosign.simplesigning.v1+json", payload,
                 annotations={"dev.cosignproject.cosign/signature": base64.b64encode(sig).decode()})
    m = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": desc("application/vnd.oci.image.config.v1+json", config),
                    "layers": [layer]}).encode()
    put_manifest(reg, repo, d.replace(":", "-") + ".sig", OCI_MANIFEST, m)
    return pub


def sign_keyless(reg, repo, work, manifest, sign_js):
    with open(f"{work}/manifest.json", "wb") as f:
        f.write(manifest)
    out = f"{work}/signed"
    os.makedirs(out)
    subprocess.run(["node", sign_js, out, f"{work}/manifest.json", WORKFLOW, GITHUB], check=True)
    bundle = open(f"{out}/message.json", "rb").read()
    media_type = json.loads(bundle)["mediaType"]  # v0.2: attached under its own type
    empty = b"{}"
    upload(reg, repo, empty)
    upload(reg, repo, bundle)
    d = digest(manifest)
    referrer = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": media_type,
        "config": desc("application/vnd.oci.empty.v1+json", empty),
        "layers": [desc(media_type, bundle)],
        "subject": desc(OCI_MANIFEST, manifest),
    }).encode()
    put_manifest(reg, repo, digest(referrer), OCI_MANIFEST, referrer)
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX,
                        "manifests": [desc(OCI_MANIFEST, referrer, artifactType=media_type)]}).encode()
    put_manifest(reg, repo, d.replace(":", "-"), OCI_INDEX, index)
    return f"{out}/trusted_root.json"


def start_registry(work):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with open(f"{work}/config.yml", "w") as f:
        f.write(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
                f"    rootdirectory: {work}/storage\nhttp:\n  addr: 127.0.0.1:{port}\n")
    proc = subprocess.Popen(["docker-registry", "serve", f"{work}/config.yml"],
                            stdout=subprocess.DEVNULL, stderr=open(f"{work}/registry.log", "w"))
    for _ in range(400):
        try:
            request("GET", f"http://127.0.0.1:{port}/v2/")
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("docker-registry did not answer")


def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(xs, unit=""):
    return f"{statistics.median(xs):.3f}{unit} [{pct(xs, 10):.3f}–{pct(xs, 90):.3f}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("durasync")
    ap.add_argument("sign_js")
    ap.add_argument("--wasm")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--keep", action="store_true", help="leave the registry running and print both commands")
    a = ap.parse_args()
    durasync = os.path.abspath(a.durasync)
    wasm = open(a.wasm, "rb").read() if a.wasm else os.urandom(18 << 20)
    work = tempfile.mkdtemp(prefix="durasync-bench-sigstore-")
    proc = None
    try:
        proc, reg = start_registry(work)
        key_manifest = push_plugin(reg, "bench/key", wasm)
        keyless_manifest = push_plugin(reg, "bench/keyless", wasm)
        d = digest(key_manifest)
        assert digest(keyless_manifest) == d
        pub = sign_with_key(reg, "bench/key", work, d)
        root = sign_keyless(reg, "bench/keyless", work, keyless_manifest, a.sign_js)
        args = {
            "key": [f"oci://{reg}/bench/key:v1", "--key", pub],
            "keyless": [f"oci://{reg}/bench/keyless:v1", "--trusted-root", root,
                        "--certificate-oidc-issuer", GITHUB, "--certificate-identity", WORKFLOW],
        }
        env = dict(os.environ, DURASYNC_LOG="warn")
        for v in ("DOCKER_CONFIG", "REGISTRY_AUTH_FILE", "DURASYNC_REGISTRY_MIRRORS"):
            env.pop(v, None)

        def pull(which):
            cache = f"{work}/cache-{which}"
            shutil.rmtree(cache, ignore_errors=True)
            env["XDG_CACHE_HOME"] = env["HOME"] = cache
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            out = subprocess.run([durasync, "pull", *args[which], "--cache-dir", f"{cache}/durasync"],
                                 env=env, capture_output=True, text=True)
            dt = time.perf_counter() - t
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            if out.returncode != 0 or "signed by:" not in out.stdout:
                sys.exit(f"{which}: exit {out.returncode}\n{out.stdout}{out.stderr}")
            return dt, cpu, out.stdout

        if a.keep:
            for w in args:
                print(f"{w}: {durasync} pull {' '.join(args[w])} --cache-dir {work}/cache-{w}/durasync")
            print(f"registry pid {proc.pid}, work dir {work}")
            proc = None
            return
        # One of each first, unmeasured (the registry's and the page cache's warm-up).
        for which in ("key", "keyless"):
            _, _, text = pull(which)
            print(f"{which}: " + next(l for l in text.splitlines() if l.startswith("signed by:")))
        times = {"key": [], "keyless": []}
        cpus = {"key": [], "keyless": []}
        ratios, cpu_ratios = [], []
        for i in range(a.rounds):
            order = ("key", "keyless") if i % 2 == 0 else ("keyless", "key")
            got = {w: pull(w)[:2] for w in order}
            for w in got:
                times[w].append(got[w][0])
                cpus[w].append(got[w][1])
            ratios.append(got["keyless"][0] / got["key"][0])
            cpu_ratios.append(got["keyless"][1] / got["key"][1])
        size = len(wasm) / (1 << 20)
        what = os.path.basename(a.wasm) if a.wasm else "random bytes"
        print(f"cold pull + verify of {size:.1f} MiB ({what}), fresh cache each pull, {a.rounds} rounds, "
              f"median [p10–p90]")
        print(f"  wall: key (.sig tag) {summary(times['key'], ' s')}, "
              f"keyless (bundle, referrers tag) {summary(times['keyless'], ' s')}")
        print(f"  wall: keyless ÷ key, per round {summary(ratios)}")
        print(f"  cpu (user + sys): key {summary(cpus['key'], ' s')}, keyless {summary(cpus['keyless'], ' s')}")
        print(f"  cpu: keyless ÷ key, per round {summary(cpu_ratios)}")
    finally:
        if proc:
            proc.kill()
            proc.wait()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
