#!/usr/bin/env python3
"""btrfs: 1000 new 4 KiB files written and fsynced from 1, 4 or 16 threads, then
the directory fsynced; ROUNDS interleaved rounds, order rotated (issue 20:
how many parallel fsyncs btrfs wants). Root: makes, loop-mounts and removes a
sparse image under /var/tmp/perf-bt.

    python3 host/benches/btrfs_fsync_threads.py ROUNDS
"""
import os, subprocess, time, statistics, shutil, sys
from concurrent.futures import ThreadPoolExecutor
work = "/var/tmp/perf-bt"; os.makedirs(work, exist_ok=True)
img, mnt = f"{work}/b.img", f"{work}/mnt"
open(img, "wb").truncate(4 << 30)
subprocess.run(["mkfs.btrfs", "-q", "-f", img], check=True); os.makedirs(mnt, exist_ok=True)
subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
def one(d, i, fs):
    fd = os.open(f"{d}/f{i:05}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, os.urandom(4096)); os.fsync(fd); os.close(fd)
res = {1: [], 4: [], 16: []}
try:
    for r in range(int(sys.argv[1])):
        order = [1, 4, 16][r % 3:] + [1, 4, 16][:r % 3]
        for t in order:
            d = f"{mnt}/d{t}"; os.mkdir(d)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(t) as ex: list(ex.map(lambda i: one(d, i, None), range(1000)))
            fd = os.open(d, os.O_RDONLY); os.fsync(fd); os.close(fd)
            res[t].append((time.perf_counter() - t0) * 1000)
            shutil.rmtree(d)
    for t, xs in res.items(): print(f"btrfs 1000 x 4 KiB, {t:2} threads: median {statistics.median(xs):.0f} ms  {sorted(int(x) for x in xs)}")
finally:
    subprocess.run(["umount", mnt]); os.unlink(img)
