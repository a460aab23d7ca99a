#!/usr/bin/env python3
"""What owners, labels and carried attributes cost on a full replace.

For each file system (ext4 with its journal, xfs, btrfs; each made in a
sparse image and loop-mounted here, so run as root) and each round, every
variant replaces its own target of N files of 4 KiB with fresh contents
(the same bytes for every variant in a round), in an order rotated by one
every round. Every row is the whole `durasync sync` process:

  kernel    `--label kernel`: durasync sets nothing and reads nothing; the
            kernel decides owner and label (what durasync did before it
            handled them): the baseline
  default   no flag: the label of each replaced file is read (the target's
            files are unlabelled, as on a host without SELinux) and none set
  owners    every file and directory of the target labelled
            (`security.selinux`); `--owner 1000 --group 1000`: per file a
            `fchown` and one `fsetxattr` (its label) before its fsync, per
            replaced file a label read and a `statat`
  labelled  the same target, each file also holding one `user.*`
            attribute, and `--preserve xattrs` too: per file a `fchown` and
            two `fsetxattr`, per replaced file a `statat`, a label read, a
            list and a value read

Ratios are per round (row / kernel of the same round), median [p10-p90].
Before each timed step the file system holding the images is written back
(`sync -f`), as in fs_flush.py. Never asserts on times.

    python3 host/benches/attrs_cost.py BINARY [--n 1000] [--rounds 11]
        [--fs ext4,xfs,btrfs] [--work /var/tmp] [--smoke]
"""
import os, shutil, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_flush import fmt, mount, unmount  # noqa: E402  (the same images, mounts and figures)

LABEL = b"system_u:object_r:kubernetes_file_t:s0"


def args():
    a = {"n": 1000, "rounds": 11, "fs": "ext4,xfs,btrfs", "work": "/var/tmp", "smoke": False}
    it = iter(sys.argv[2:])
    for x in it:
        if x == "--smoke":
            a["smoke"] = True
        else:
            a[x[2:].replace("-", "_")] = next(it)
    if a["smoke"]:
        a.update(n=40, rounds=2, fs="ext4")
    a["n"], a["rounds"] = int(a["n"]), int(a["rounds"])
    return a


def write_src(src, n, r):
    shutil.rmtree(src, ignore_errors=True)
    for d in range(10):
        os.makedirs(f"{src}/d{d}")
    for i in range(n):
        with open(f"{src}/d{i % 10}/f{i}", "wb") as f:
            f.write((f"round {r} file {i} ".encode() * 300)[:4096])


def label_tree(path, user=True):
    for root, dirs, files in os.walk(path):
        for name in [root] + [os.path.join(root, f) for f in files]:
            os.setxattr(name, "security.selinux", LABEL, follow_symlinks=False)
            if user and name != root:
                os.setxattr(name, "user.origin", b"vendor", follow_symlinks=False)


def flags(variant):
    return {
        "kernel": ["--label", "kernel"],
        "default": [],
        "owners": ["--owner", "1000", "--group", "1000"],
        "labelled": ["--owner", "1000", "--group", "1000", "--preserve", "xattrs"],
    }[variant]


def sync(binary, target, src, variant, img):
    subprocess.run(["sync", "-f", img], check=True)
    t0 = time.perf_counter()
    subprocess.run([binary, "sync", target, "--from", src, "--flush", "fsync"] + flags(variant),
                   check=True, capture_output=True)
    return (time.perf_counter() - t0) * 1000


def run_fs(binary, fs, n, rounds, work):
    img, mnt = mount(fs, work)
    try:
        variants = ["kernel", "default", "owners", "labelled"]
        src = f"{mnt}/src"
        write_src(src, n, 0)
        for v in variants:
            subprocess.run([binary, "sync", f"{mnt}/{v}", "--from", src], check=True, capture_output=True)
        label_tree(f"{mnt}/labelled")
        label_tree(f"{mnt}/owners", user=False)
        times = {v: [] for v in variants}
        for r in range(1, rounds + 1):
            write_src(src, n, r)
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for v in order:
                times[v].append(sync(binary, f"{mnt}/{v}", src, v, img))
        # The labelled target kept its labels and got the owners: checked, not assumed.
        probe = f"{mnt}/labelled/d3/f3"
        assert os.getxattr(probe, "security.selinux", follow_symlinks=False) == LABEL
        assert os.getxattr(probe, "user.origin", follow_symlinks=False) == b"vendor"
        assert os.stat(probe).st_uid == 1000
        print(f"\n### {fs}, N = {n} x 4 KiB full replace, {rounds} rounds (--flush fsync)")
        print("| variant | ms | / kernel |")
        print("|---|---|---|")
        for v in variants:
            ratios = [t / k for t, k in zip(times[v], times["kernel"])]
            print(f"| {v} | {fmt(times[v])} | {fmt(ratios, 'x')} |")
    finally:
        unmount(img, mnt)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    a = args()
    binary = os.path.abspath(sys.argv[1])
    for fs in a["fs"].split(","):
        run_fs(binary, fs, a["n"], a["rounds"], a["work"])


if __name__ == "__main__":
    main()
