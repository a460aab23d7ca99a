#!/usr/bin/env python3
"""Before/after cost of a change on the hot paths, whole-process:
`durasync sync --from SRC TARGET` for (a) an unchanged check of 1000 x 4 KiB
files, (b) a full replace of 1000 x 4 KiB files and (c) a change of one of
them (the 501st) right after (b); old and new binaries
interleaved, order alternating each round. Prints medians and p10-p90.

    python3 host/benches/before_after.py OLD_BINARY NEW_BINARY SCRATCH_DIR ROUNDS [EXTRA_ARGS]

EXTRA_ARGS (one string, split on spaces) goes after `sync` on both sides,
e.g. "--flush fsync" so both flush the same way whatever else is dirty.

Build OLD_BINARY from the commit before the change (e.g. a worktree of it,
`cargo build -p durasync --bin durasync`) and copy it aside first. SCRATCH_DIR
is removed at the end."""
import os, shutil, statistics, subprocess, sys, time
old, new, base, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
extra = sys.argv[5].split() if len(sys.argv) > 5 else []
def tree(path, seed, one=None):
    os.makedirs(path)
    for i in range(1000):
        with open(f"{path}/f{i:04}", "wb") as f:
            f.write(bytes((seed + i + j + (i == one)) % 251 for j in range(4096)))
def q(xs):
    xs = sorted(xs); n = len(xs)
    return statistics.median(xs), xs[max(0, n // 10)], xs[min(n - 1, (9 * n) // 10)]
os.makedirs(base, exist_ok=True)
srcs, ones = [], []
for s in range(2):
    p = f"{base}/src{s}"; shutil.rmtree(p, ignore_errors=True); tree(p, s); srcs.append(p)
    p = f"{base}/one{s}"; shutil.rmtree(p, ignore_errors=True); tree(p, s, one=500); ones.append(p)
cases = ("unchanged", "replace", "one file")
res = {(b, k): [] for b in ("old", "new") for k in cases}
for r in range(rounds):
    order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
    for name, binary in order:
        t = f"{base}/t-{name}"
        # replace: the target holds the other source's tree
        subprocess.run([binary, "sync", *extra, "--from", srcs[(r + 1) % 2], t], check=True, capture_output=True)
        t0 = time.perf_counter()
        subprocess.run([binary, "sync", *extra, "--from", srcs[r % 2], t], check=True, capture_output=True)
        res[(name, "replace")].append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        subprocess.run([binary, "sync", *extra, "--from", srcs[r % 2], t], check=True, capture_output=True)
        res[(name, "unchanged")].append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        subprocess.run([binary, "sync", *extra, "--from", ones[r % 2], t], check=True, capture_output=True)
        res[(name, "one file")].append((time.perf_counter() - t0) * 1000)
for k in cases:
    ratios = [n / o for n, o in zip(res[("new", k)], res[("old", k)])]
    mo, mn, mr = q(res[("old", k)]), q(res[("new", k)]), q(ratios)
    print(f"{k:9} old {mo[0]:7.1f} ms [{mo[1]:.1f}-{mo[2]:.1f}]  new {mn[0]:7.1f} ms [{mn[1]:.1f}-{mn[2]:.1f}]  new/old {mr[0]:.3f} [{mr[1]:.3f}-{mr[2]:.3f}]  ({rounds} rounds)")
shutil.rmtree(base)
