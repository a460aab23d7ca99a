#!/usr/bin/env python3
"""The unchanged check against `diff -rq`, whole-process: two identical trees
of 1000 x 4 KiB files, `durasync sync --from SRC TARGET` (nothing to do) and
`diff -rq SRC TARGET` interleaved with `durasync --version` (process start),
ROUNDS rounds. Prints medians, p10-p90 and the per-round ratio; with OLD
(another build), its unchanged sync too, in the same rounds, and new / old.

    python3 host/benches/unchanged_vs_diff.py BINARY SCRATCH_DIR ROUNDS [OLD]

Use a release build (`cargo build --release -p durasync`). SCRATCH_DIR is
removed at the end."""
import os, shutil, statistics, subprocess, sys, time
binary, base, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
old = sys.argv[4] if len(sys.argv) > 4 else None
def q(xs):
    xs = sorted(xs); n = len(xs)
    return statistics.median(xs), xs[max(0, n // 10)], xs[min(n - 1, (9 * n) // 10)]
src, target = f"{base}/src", f"{base}/target"
shutil.rmtree(base, ignore_errors=True)
os.makedirs(src)
for i in range(1000):
    with open(f"{src}/f{i:04}", "wb") as f:
        f.write(bytes((i + j) % 251 for j in range(4096)))
subprocess.run([binary, "sync", "--from", src, target], check=True, capture_output=True)
cmds = {
    "start": [binary, "--version"],
    "unchanged": [binary, "sync", "--from", src, target],
    "diff -rq": ["diff", "-rq", src, target],
}
if old:
    cmds["old"] = [old, "sync", "--from", src, target]
res = {k: [] for k in cmds}
for _ in range(rounds):
    for k, c in cmds.items():
        t0 = time.perf_counter()
        subprocess.run(c, check=True, capture_output=True)
        res[k].append((time.perf_counter() - t0) * 1000)
for k in cmds:
    m, lo, hi = q(res[k])
    print(f"{k:10s} {m:7.1f} ms [{lo:.1f}-{hi:.1f}]  ({rounds} rounds)")
m, lo, hi = q([u / d for u, d in zip(res["unchanged"], res["diff -rq"])])
print(f"unchanged / diff -rq per round: {m:.2f} [{lo:.2f}-{hi:.2f}]")
if old:
    m, lo, hi = q([u / d for u, d in zip(res["old"], res["diff -rq"])])
    print(f"old / diff -rq per round: {m:.2f} [{lo:.2f}-{hi:.2f}]")
    m, lo, hi = q([u / o for u, o in zip(res["unchanged"], res["old"])])
    print(f"unchanged new / old per round: {m:.3f} [{lo:.3f}-{hi:.3f}]")
shutil.rmtree(base)
