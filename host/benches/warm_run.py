#!/usr/bin/env python3
"""Warm `durasync run` of one manifest with two binaries, interleaved (order
alternating each round), same cache; prints each binary's median with
p10-p90 and the per-round ratio second/first.

    python3 host/benches/warm_run.py BEFORE_BINARY AFTER_BINARY MANIFEST INPUT_FILE ROUNDS

Both binaries run MANIFEST once untimed first (filling the compile cache
and, for a binary that has them, the remembered pins)."""
import statistics, subprocess, sys, time

before, after, manifest, input_file, rounds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
bins = {"before": before, "after": after}
run = lambda b: subprocess.run([b, "run", manifest, "--input", input_file], check=True, capture_output=True)
for b in bins.values():
    run(b)
res = {k: [] for k in bins}
for r in range(rounds):
    for k in (list(bins) if r % 2 == 0 else list(bins)[::-1]):
        t = time.perf_counter()
        run(bins[k])
        res[k].append((time.perf_counter() - t) * 1000)
def q(x):
    x = sorted(x); n = len(x)
    return statistics.median(x), x[n // 10], x[(9 * n) // 10]
for k in res:
    print(k, "median %.1f ms [%.1f-%.1f]" % q(res[k]))
print("after/before median %.3f [%.3f-%.3f]" % q([a / b for a, b in zip(res["after"], res["before"])]), f"({rounds} rounds)")
