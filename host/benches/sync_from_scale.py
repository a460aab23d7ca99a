#!/usr/bin/env python3
"""`durasync sync --from` at scale: time and peak RSS at N = 1 000, 10 000 and
90 000 files of 4 KiB, against the floors of the same run.

On one loop-mounted file system (fs_flush.py's `mount`, so run as root), for
each N and each round, in an order rotated by one every round:

  replace      `durasync sync T --from SRC` (flush auto), every file new,
               against fs_flush.py's syncfs-floor of the same N and round
               (files written, one syncfs, exchange, parent fsynced, old
               tree removed)
  one file     the same with one file of SRC changed, against `diff -rq SRC T`
               of the same trees plus two fsyncs (a 4 KiB file written and
               fsynced, renamed over its target, the directory fsynced)

Each `durasync` row is the whole process, its peak RSS its own `ru_maxrss`
(`os.wait4`), and for the one-file change its CPU time (user + system)
against `diff -rq`'s, which a loaded machine disturbs less than wall time.
With `--old BINARY`, the same rows for another build (main's), in the same
rounds. Ratios are per round, reported as median [p10-p90].
Never asserts anything.

    python3 host/benches/sync_from_scale.py BINARY [--old BINARY] [--ns 1000,10000,90000]
        [--rounds 5] [--fs ext4] [--work /var/tmp]
"""
import os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_flush import baseline, contents, fmt, mount, settle, unmount, write_tree  # noqa: E402


def args():
    a = {"old": None, "ns": "1000,10000,90000", "rounds": 5, "fs": "ext4", "work": "/var/tmp"}
    it = iter(sys.argv[2:])
    for x in it:
        a[x[2:]] = next(it)
    ns = [int(n) for n in a["ns"].split(",")]
    return os.path.abspath(sys.argv[1]), a["old"] and os.path.abspath(a["old"]), ns, int(a["rounds"]), a["fs"], a["work"]


CPU = {}  # the CPU time (user + system, ms) of each `timed` command, by command line


def timed(cmd, ok=(0,)):
    """Run `cmd`, which must exit with a code in `ok` (`diff` says
    "different" with 1; a sync that fails also exits 1, and a failed sync
    is no figure); its wall time in ms and its peak RSS in MiB (its CPU
    time in `CPU`)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    ms = (time.perf_counter() - t0) * 1000
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode not in ok:
        raise RuntimeError(f"{cmd}: exit {p.returncode}: {p.stderr.read().decode()}")
    p.stderr.close()
    CPU[tuple(cmd)] = (usage.ru_utime + usage.ru_stime) * 1000
    return ms, usage.ru_maxrss / 1024


def two_fsyncs(parent):
    """The one-file floor's durable part: write + fsync a temporary file,
    rename it over a file of the tree, fsync the directory."""
    t0 = time.perf_counter()
    fd = os.open(f"{parent}/.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, contents(0, 99))
    os.fsync(fd)
    os.close(fd)
    os.rename(f"{parent}/.tmp", f"{parent}/t/f00000")
    dfd = os.open(f"{parent}/t", os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    os.close(dfd)
    return (time.perf_counter() - t0) * 1000


def run(binaries, n, rounds, img, mnt):
    rows = {f"{b} replace": [] for b in binaries} | {f"{b} one file": [] for b in binaries}
    rss = {k: [] for k in rows}
    floor, diff, fsyncs = [], [], []
    cpu = {k: [] for k in rows} | {"diff": []}
    variants = list(binaries) + ["floor"]
    for r in range(rounds):
        order = variants[r % len(variants):] + variants[: r % len(variants)]
        for v in order:
            parent = f"{mnt}/p-{v}"
            shutil.rmtree(parent, ignore_errors=True)
            os.mkdir(parent)
            write_tree(f"{parent}/t", 1000 + r, n)  # the old tree
            subprocess.run(["sync", "-f", parent], check=True)
            if v == "floor":
                settle(img, False)
                floor.append(baseline("syncfs-floor", parent, n, r))
                # diff -rq of two equal trees but one file, then 2 fsyncs.
                src = f"{mnt}/src-floor"
                shutil.rmtree(src, ignore_errors=True)
                write_tree(src, r, n)
                os.truncate(f"{src}/f{n // 2:05}", 100)
                subprocess.run(["sync", "-f", mnt], check=True)
                cmd = ["diff", "-rq", src, f"{parent}/t"]
                diff.append(timed(cmd, ok=(1,))[0])
                cpu["diff"].append(CPU[tuple(cmd)])
                settle(img, False)
                fsyncs.append(two_fsyncs(parent))
                shutil.rmtree(src)
            else:
                binary = binaries[v]
                src = f"{mnt}/src-{v}"
                shutil.rmtree(src, ignore_errors=True)
                write_tree(src, r, n)
                subprocess.run(["sync", "-f", src], check=True)
                settle(img, False)
                ms, mib = timed([binary, "sync", f"{parent}/t", "--from", src])
                rows[f"{v} replace"].append(ms)
                rss[f"{v} replace"].append(mib)
                cpu[f"{v} replace"].append(CPU[(binary, "sync", f"{parent}/t", "--from", src)])
                os.truncate(f"{src}/f{n // 2:05}", 100)
                subprocess.run(["sync", "-f", mnt], check=True)
                settle(img, False)
                ms, mib = timed([binary, "sync", f"{parent}/t", "--from", src])
                rows[f"{v} one file"].append(ms)
                rss[f"{v} one file"].append(mib)
                cpu[f"{v} one file"].append(CPU[(binary, "sync", f"{parent}/t", "--from", src)])
                shutil.rmtree(src)
            shutil.rmtree(parent)
    print(f"\n#### N = {n} x 4 KiB, {rounds} rounds, ms and peak RSS MiB, median [p10-p90]")
    print(f"  syncfs-floor        {fmt(floor)} ms")
    print(f"  diff -rq            {fmt(diff)} ms")
    print(f"  2 fsyncs            {fmt(fsyncs)} ms")
    one_floor = [d + f for d, f in zip(diff, fsyncs)]
    for k in rows:
        base = floor if k.endswith("replace") else one_floor
        what = "syncfs-floor" if k.endswith("replace") else "diff -rq + 2 fsyncs"
        ratios = [x / y for x, y in zip(rows[k], base)]
        print(f"  {k:18}  {fmt(rows[k])} ms, {fmt(ratios, 'x')} {what}; peak RSS {fmt(rss[k])} MiB")
    # CPU time, which a loaded machine disturbs less than wall time: each
    # one-file sync against `diff -rq` of the same round.
    print(f"  CPU diff -rq        {fmt(cpu['diff'])} ms")
    for k in rows:
        if k.endswith("one file"):
            ratios = [x / y for x, y in zip(cpu[k], cpu["diff"])]
            print(f"  CPU {k:14}  {fmt(cpu[k])} ms, {fmt(ratios, 'x')} diff -rq's CPU")


def main():
    binary, old, ns, rounds, fs, work = args()
    binaries = {"new": binary} | ({"old": old} if old else {})
    for name, b in binaries.items():
        out = subprocess.run([b, "--version"], capture_output=True, text=True).stdout.strip()
        print(f"{name}: {b}: {out}")
    print(f"kernel {os.uname().release}; {os.cpu_count()} cpus; {fs} loop-mounted in {work}")
    tmp = tempfile.mkdtemp(prefix="durasync-sync-from-", dir=work)
    # Three trees at once (the old target, the source, the staging tree):
    # ext4's default of one inode per 16 KiB has 262 144 on the 4 GiB image,
    # too few for 3 x 90 000 files.
    img, mnt = mount(fs, tmp, inodes=4 * max(ns) + 1000)
    try:
        opts = subprocess.run(["findmnt", "-no", "SOURCE,FSTYPE,OPTIONS", mnt], capture_output=True, text=True).stdout.strip()
        print(f"### {fs} ({opts})")
        for n in ns:
            run(binaries, n, rounds, img, mnt)
    finally:
        unmount(img, mnt)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
