#!/usr/bin/env python3
"""The symlink layout's cost against the exchange, through the real binary.

For N files of 4 KiB in 10 subdirectories, each round syncs a fresh target
to tree A, then times (whole process, `--flush fsync`) a full replace with
tree B and a one-file change (one file of B rewritten), once into a target
in the default layout and once into one in the symlink layout
(`--layout symlink`), the order alternating between rounds. Prints medians
[p10-p90] of each and of the per-round ratio symlink / exchange. Never
asserts on anything.

    python3 host/benches/layout_cost.py BINARY WORK_DIR [N] [ROUNDS]
"""
import os, shutil, statistics, subprocess, sys, time


def make(d, tag, n, change_one=None):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for i in range(n):
        sub = os.path.join(d, f"d{i % 10}")
        os.makedirs(sub, exist_ok=True)
        data = (f"{tag}-{i}\n" * 512)[:4096]
        if i == change_one:
            data = ("X" + data)[:4096]
        with open(os.path.join(sub, f"f{i}"), "w") as f:
            f.write(data)


def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 31
    os.makedirs(work, exist_ok=True)
    srcs = {t: os.path.join(work, f"src-{t}") for t in ["A", "B", "B1"]}
    make(srcs["A"], "A", n)
    make(srcs["B"], "B", n)
    make(srcs["B1"], "B", n, change_one=7)

    def run(target, src, linked):
        args = [binary, "sync", target, "--from", src, "--flush", "fsync"]
        if linked:
            args += ["--layout", "symlink"]
        t = time.perf_counter()
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t

    res = {k: [] for k in ["exchange full", "symlink full", "exchange one", "symlink one"]}
    try:
        for r in range(rounds):
            for linked in ([False, True] if r % 2 == 0 else [True, False]):
                name = "symlink" if linked else "exchange"
                target = os.path.join(work, f"t-{name}")
                shutil.rmtree(target, ignore_errors=True)
                run(target, srcs["A"], linked)
                subprocess.run(["sync"], check=True)
                res[f"{name} full"].append(run(target, srcs["B"], linked))
                res[f"{name} one"].append(run(target, srcs["B1"], linked))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{n} files x 4 KiB, {rounds} rounds, {binary}")
    for kind, what in [("full", "full replace"), ("one", "one file changed")]:
        ex, ln = res[f"exchange {kind}"], res[f"symlink {kind}"]
        ratios = [a / b for a, b in zip(ln, ex)]
        print(f"{what}: exchange {statistics.median(ex) * 1000:.1f} ms [{q(ex, .1) * 1000:.1f}-{q(ex, .9) * 1000:.1f}], "
              f"symlink {statistics.median(ln) * 1000:.1f} ms [{q(ln, .1) * 1000:.1f}-{q(ln, .9) * 1000:.1f}], "
              f"symlink / exchange {statistics.median(ratios):.3f} [{q(ratios, .1):.3f}-{q(ratios, .9):.3f}]")


if __name__ == "__main__":
    main()
