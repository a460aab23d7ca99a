#!/usr/bin/env python3
"""What a validator costs a changed sync: two durasync binaries (e.g. before
and after a change), each syncing a tree of N files where one file changes,
with and without `--validate true`, interleaved (the order rotated every
round), `--flush fsync` unless told. Prints the median and p10-p90 per variant, in ms.

    python3 host/benches/validator_cost.py OLD_BINARY NEW_BINARY [--rounds K] [--n 100,1000] [--work DIR] [--flush auto|fsync|syncfs]

Numbers are never asserted (BENCHMARKS.md, "A validator's cost")."""
import argparse, os, shutil, statistics, subprocess, tempfile, time

p = argparse.ArgumentParser()
p.add_argument("old"); p.add_argument("new")
p.add_argument("--rounds", type=int, default=11)
p.add_argument("--n", default="100,1000")
p.add_argument("--work", default="/var/tmp")
p.add_argument("--flush", default="fsync", help="auto|fsync|syncfs, for every sync")
a = p.parse_args()

base = tempfile.mkdtemp(prefix="durasync-validator-cost-", dir=a.work)
try:
    def tree(d, n, tag):
        os.makedirs(d)
        for i in range(n):
            with open(f"{d}/f{i:05}", "wb") as f:
                f.write(b"x" * 4000 + (tag if i == 0 else b"0"))

    results = {}
    for n in map(int, a.n.split(",")):
        src_a, src_b = f"{base}/a{n}", f"{base}/b{n}"
        tree(src_a, n, b"A"); tree(src_b, n, b"B")
        variants = [(name, binary, v) for name, binary in (("old", a.old), ("new", a.new)) for v in (False, True)]
        for r in range(a.rounds):
            k = r % len(variants)
            for name, binary, v in variants[k:] + variants[:k]:
                target = f"{base}/t-{name}-{v}-{n}"
                if not os.path.exists(target):
                    subprocess.run([binary, "sync", target, "--from", src_a, "--flush", a.flush], check=True, capture_output=True)
                src = src_b if r % 2 == 0 else src_a  # one file differs each round
                cmd = [binary, "sync", target, "--from", src, "--flush", a.flush] + (["--validate", "true"] if v else [])
                os.sync()
                t = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True)
                results.setdefault((n, v, name), []).append((time.perf_counter() - t) * 1000)
    for (n, v, name), xs in sorted(results.items()):
        q = statistics.quantiles(xs, n=10)
        print(f"{n:5} files  validator={'yes' if v else 'no ':3}  {name}: median {statistics.median(xs):7.1f} ms  p10-p90 {q[0]:7.1f}-{q[-1]:7.1f}  (n={len(xs)})")
finally:
    shutil.rmtree(base, ignore_errors=True)
