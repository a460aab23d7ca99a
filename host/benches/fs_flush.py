#!/usr/bin/env python3
"""The flush strategies on the file systems nodes run (issue 20, items 1, 2, 4).

For each file system (ext4 with its journal, xfs, btrfs; each made in a
sparse image and loop-mounted here, so run as root) and each round, every
variant runs once, in an order rotated by one every round. N files of 4 KiB,
fresh contents every round; every durasync row is the whole `durasync sync`
process (`--flush auto|fsync|syncfs`) from a source tree already written
back (`sync -f`, like the old tree), the baselines are the same steps in
this process:

  upstream     library-go: each file written and fsynced one at a time into a
               staging dir, the staging dir fsynced, exchange, parent fsynced
               (2N + 2 sequential fsyncs), old tree removed
  fsync-floor  files written and fsynced from 16 threads, staging fsynced,
               exchange, parent fsynced, old tree removed
  syncfs-floor files written, one syncfs, exchange, parent fsynced, old tree
               removed as durasync removes it (the issue's syncfs floor)

Ratios are per round (durasync row / baseline of the same round), reported
as median [p10-p90]. The unchanged check (durasync, target already equal)
is measured against `diff -rq` of the same two trees.

busy node: the same rows while another process keeps >= 1 GiB dirty on the
same file system (rewriting a 1.25 GiB file in place without any fsync).
Quiet rounds write back the file system holding the images before each timed
step (see `settle`), so the machine is as quiet as a node with a real disk.

    python3 host/benches/fs_flush.py BINARY [--n 1000] [--rounds 9] [--busy-rounds 5]
        [--fs ext4,xfs,btrfs] [--work /var/tmp] [--smoke]

`--smoke`: one fs (ext4), N=40, 2 rounds, no busy node: checks the harness.
Never asserts on times.
"""
import ctypes, os, shutil, statistics, subprocess, sys, tempfile, threading, time
from concurrent.futures import ThreadPoolExecutor

libc = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE = 2


def syncfs(fd):
    if libc.syncfs(fd) != 0:
        raise OSError(ctypes.get_errno(), "syncfs")


def exchange(parent_fd, a, b):
    if libc.renameat2(parent_fd, a.encode(), parent_fd, b.encode(), RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


def args():
    a = {"n": 1000, "rounds": 9, "busy_rounds": 5, "fs": "ext4,xfs,btrfs", "work": "/var/tmp", "smoke": False}
    it = iter(sys.argv[2:])
    for x in it:
        if x == "--smoke":
            a["smoke"] = True
        else:
            a[x[2:].replace("-", "_")] = next(it)
    if a["smoke"]:
        a.update(n=40, rounds=2, busy_rounds=0, fs="ext4")
    return sys.argv[1], int(a["n"]), int(a["rounds"]), int(a["busy_rounds"]), a["fs"].split(","), a["work"]


def contents(i, r):
    head = f"f{i:05} round {r}\n".encode()
    return (head * (4096 // len(head) + 1))[:4096]


def write_tree(path, r, n, fsync_each=False, threads=1):
    os.mkdir(path, 0o755)

    def one(i):
        fd = os.open(f"{path}/f{i:05}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, contents(i, r))
        if fsync_each:
            os.fsync(fd)
        os.close(fd)

    if threads > 1:
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(one, range(n)))
    else:
        for i in range(n):
            one(i)


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)


def baseline(kind, parent, n, r):
    """One replace of parent/t by the given baseline; returns ms."""
    t0 = time.perf_counter()
    stage = f"{parent}/.stage"
    if kind == "upstream":
        write_tree(stage, r, n, fsync_each=True)
        fsync_path(stage)
    elif kind == "fsync-floor":
        write_tree(stage, r, n, fsync_each=True, threads=16)
        fsync_path(stage)
    else:  # syncfs-floor
        write_tree(stage, r, n)
        fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY)
        syncfs(fd)
        os.close(fd)
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    exchange(pfd, ".stage", "t")
    os.fsync(pfd)
    os.close(pfd)
    shutil.rmtree(stage)
    return (time.perf_counter() - t0) * 1000


def durasync(binary, flush, parent, src):
    t0 = time.perf_counter()
    subprocess.run([binary, "sync", f"{parent}/t", "--from", src, "--flush", flush], check=True, capture_output=True)
    return (time.perf_counter() - t0) * 1000


def q(xs):
    xs = sorted(xs)
    n = len(xs)
    return statistics.median(xs), xs[max(0, n // 10)], xs[min(n - 1, (9 * n) // 10)]


def fmt(xs, unit=""):
    m, lo, hi = q(xs)
    d = 3 if unit == "x" else 1
    return f"{m:.{d}f}{unit} [{lo:.{d}f}-{hi:.{d}f}]"


class Busy:
    """Another writer keeping >= 1 GiB dirty on the same file system."""

    SIZE = 1280 << 20

    def __init__(self, mnt):
        self.path = f"{mnt}/busy.dat"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        block = os.urandom(1 << 20)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        off = 0
        while not self.stop.is_set():
            os.pwrite(fd, block, off)
            off = (off + len(block)) % self.SIZE
        os.close(fd)

    def __enter__(self):
        self.thread.start()
        # Wait (bounded) until the machine holds at least 1 GiB dirty.
        deadline = time.time() + 60
        while dirty_bytes() < (1 << 30) and time.time() < deadline:
            time.sleep(0.2)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        os.unlink(self.path)


def dirty_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Dirty:"):
                return int(line.split()[1]) * 1024
    return 0


def settle(img, busy):
    """Before a quiet round's timed step: write back the file system that
    holds the image. A loop device over a file writes the image through
    that file system's page cache, so every `sync -f` of the mounted file
    system leaves megabytes dirty there, which a node's real disk would
    not: `auto` reads the machine-wide dirty figure (on kernels that do not
    show a device's own) and would see them. In busy rounds the other
    writer's data is the point, so nothing is written back."""
    if not busy:
        subprocess.run(["sync", "-f", img], check=True)


def mount(fs, work, inodes=None):
    """A 4 GiB image of `fs`, loop-mounted; `inodes`: at least that many
    inodes on ext4 (xfs and btrfs allocate them as needed)."""
    img, mnt = f"{work}/{fs}.img", f"{work}/mnt-{fs}"
    with open(img, "wb") as f:
        f.truncate(4 << 30)
    mkfs = {"ext4": ["mkfs.ext4", "-q", "-F", "-O", "has_journal"], "xfs": ["mkfs.xfs", "-q", "-f"],
            "btrfs": ["mkfs.btrfs", "-q", "-f"]}[fs]
    if fs == "ext4" and inodes:
        mkfs += ["-N", str(inodes)]
    subprocess.run(mkfs + [img], check=True, capture_output=True)
    os.makedirs(mnt, exist_ok=True)
    subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
    return img, mnt


def unmount(img, mnt):
    subprocess.run(["umount", mnt], check=True)
    os.unlink(img)


def run_fs(binary, fs, n, rounds, busy_rounds, work):
    img, mnt = mount(fs, work)
    try:
        opts = subprocess.run(["findmnt", "-no", "SOURCE,FSTYPE,OPTIONS", mnt], capture_output=True, text=True).stdout.strip()
        print(f"\n### {fs} ({opts}), N = {n} x 4 KiB replace")
        variants = ["auto", "fsync", "syncfs", "upstream", "fsync-floor", "syncfs-floor"]
        for label, count, busy in [("quiet", rounds, False), ("busy node", busy_rounds, True)]:
            if count == 0:
                continue
            res = {v: [] for v in variants}
            unchanged, diff = [], []
            ctx = Busy(mnt) if busy else None
            if ctx:
                ctx.__enter__()
            try:
                for r in range(count):
                    order = variants[r % len(variants):] + variants[: r % len(variants)]
                    for v in order:
                        parent = f"{mnt}/{v}"
                        shutil.rmtree(parent, ignore_errors=True)
                        os.mkdir(parent)
                        write_tree(f"{parent}/t", 1000 + r, n)  # the old tree
                        subprocess.run(["sync", "-f", parent], check=True)
                        if v in ("auto", "fsync", "syncfs"):
                            src = f"{mnt}/src-{v}"
                            shutil.rmtree(src, ignore_errors=True)
                            write_tree(src, r, n)
                            # Written back before the clock starts, like the
                            # old tree: the baselines write from memory, so
                            # flushing the bench's own source is no part of
                            # what durasync is measured against.
                            subprocess.run(["sync", "-f", src], check=True)
                            settle(img, busy)
                            res[v].append(durasync(binary, v, parent, src))
                            if v == "auto":
                                # The unchanged check against diff -rq of the same trees.
                                t0 = time.perf_counter()
                                subprocess.run([binary, "sync", f"{parent}/t", "--from", src], check=True, capture_output=True)
                                unchanged.append((time.perf_counter() - t0) * 1000)
                                t0 = time.perf_counter()
                                subprocess.run(["diff", "-rq", src, f"{parent}/t"], check=True, capture_output=True)
                                diff.append((time.perf_counter() - t0) * 1000)
                            shutil.rmtree(src)
                        else:
                            settle(img, busy)
                            res[v].append(baseline(v, parent, n, r))
                        shutil.rmtree(parent)
            finally:
                if ctx:
                    ctx.__exit__(None, None, None)
            print(f"\n{label} ({count} rounds), ms median [p10-p90]:")
            for v in variants:
                print(f"  {v:13} {fmt(res[v])}")
            print("  ratios per round:")
            for v in ("auto", "fsync", "syncfs"):
                for b in ("upstream", "fsync-floor", "syncfs-floor"):
                    rs = [x / y for x, y in zip(res[v], res[b])]
                    print(f"  {v:6} / {b:12} {fmt(rs, 'x')}")
            if unchanged:
                rs = [x / y for x, y in zip(unchanged, diff)]
                print(f"  unchanged check {fmt(unchanged)} ms, diff -rq {fmt(diff)} ms, ratio {fmt(rs, 'x')}")
    finally:
        unmount(img, mnt)


def main():
    binary, n, rounds, busy_rounds, fss, work = args()
    binary = os.path.abspath(binary)
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{out}; kernel {os.uname().release}; {os.cpu_count()} cpus; loop-mounted images in {work}")
    tmp = tempfile.mkdtemp(prefix="durasync-fs-flush-", dir=work)
    try:
        for fs in fss:
            run_fs(binary, fs, n, rounds, busy_rounds, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
