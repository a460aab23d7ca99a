#!/usr/bin/env python3
"""A node's first start of a plugin: Winch first, Cranelift in the background.

    python3 host/benches/first_start.py BEFORE_BINARY AFTER_BINARY ROUNDS [LANG] [SCRATCH_DIR]

BEFORE_BINARY compiles a miss with Cranelift; AFTER_BINARY compiles it with
Winch, runs it, and replaces the artifact with Cranelift's in the
background (`host/src/runtime/upgrade.rs`). LANG is python (default),
javascript, go or rust; the components are the ones the tests built (see
`languages.py`). Each round, in this order:

- the compile alone, by compiler: AFTER_BINARY's compile child
  (`__compile-artifact --compiler winch|cranelift`, the component on
  stdin), its time and peak RSS;
- a cold `durasync run` (empty cache) of each binary, order alternating;
  after AFTER_BINARY's, the script waits for the background compile to end
  (its time, from the run's start, is printed as "upgraded after") so that
  it never overlaps the next measurement;
- warm runs, interleaved, order rotated: BEFORE_BINARY on its Cranelift
  artifact, AFTER_BINARY on the Cranelift artifact its background compile
  stored, and AFTER_BINARY on a Winch artifact (a cache holding only Winch's
  artifact and a failure note, so nothing is upgraded).

Medians with p10-p90; ratios per round against BEFORE_BINARY's warm run of
the same round. Never asserts on times."""
import glob, hashlib, os, resource, shutil, statistics, subprocess, sys, time

before, after = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
rounds = int(sys.argv[3])
lang = sys.argv[4] if len(sys.argv) > 4 else "python"
scratch = sys.argv[5] if len(sys.argv) > 5 else "/tmp/durasync-first-start"
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
target = os.path.join(root, "target")


def newest(pattern):
    found = [p for p in glob.glob(pattern) if "-default-" not in p]
    if not found:
        sys.exit(f"no component matches {pattern}: run `cargo test -p durasync --test plugins` first")
    return max(found, key=os.path.getmtime)


wasm = {
    "rust": lambda: os.path.join(target, "wasm/wasm32-wasip2/release/example.wasm"),
    "python": lambda: newest(f"{target}/lang-tools/components/example-py-*.wasm"),
    "javascript": lambda: newest(f"{target}/lang-tools/components/example-js-*.wasm"),
    "go": lambda: newest(f"{target}/lang-tools/components/example-go-*.wasm"),
}[lang]()
data = open(wasm, "rb").read()
digest = hashlib.sha256(data).hexdigest()
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(f"{scratch}/out")
with open(f"{scratch}/input.txt", "w") as f:
    f.write("".join(f"KEY_{i}=value {i}\n" for i in range(20)))
manifest = f"{scratch}/plugin.toml"
with open(manifest, "w") as f:
    f.write(f'name = "{lang}"\nwasm = "{wasm}"\nsha256 = "{digest}"\n'
            f'[roots.out]\npath = "{scratch}/out"\naccess = "rw"\n')


def timed(argv, stdin=None):
    """(ms, peak RSS KiB) of one command, from a fresh `python3 -c` parent
    (so only that command's RSS is in RUSAGE_CHILDREN)."""
    out = subprocess.run(
        [sys.executable, "-c",
         "import resource, subprocess, sys, time\n"
         "data = sys.stdin.buffer.read()\n"
         "t0 = time.perf_counter()\n"
         "subprocess.run(sys.argv[1:], input=data, check=True, capture_output=True)\n"
         "ms = (time.perf_counter() - t0) * 1000\n"
         "print(ms, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"] + argv,
        input=stdin or b"", check=True, capture_output=True)
    ms, kb = out.stdout.split()
    return float(ms), int(kb)


def run(binary, cache):
    return timed([binary, "run", manifest, "--input", f"{scratch}/input.txt", "--cache-dir", cache])


def artifacts(cache):
    return sorted(glob.glob(f"{cache}/*.cwasm"))


def wait_upgraded(cache, t0):
    while any(p.endswith("-winch.cwasm") for p in artifacts(cache)) and not glob.glob(f"{cache}/*.failed"):
        if time.perf_counter() - t0 > 900:
            sys.exit("the background compile did not end within 15 minutes")
        time.sleep(0.05)
    return (time.perf_counter() - t0) * 1000


def q(xs, f="%.1f"):
    xs = sorted(xs)
    n = len(xs)
    return f"median {f} [{f}-{f}]" % (statistics.median(xs), xs[max(0, n // 10)], xs[min(n - 1, (9 * n) // 10)])


version = subprocess.run([after, "--version"], capture_output=True, text=True).stdout.strip()
print(f"{version}; {os.cpu_count()} cpus; {lang} component {len(data) / 1e6:.1f} MB; {rounds} rounds")

res = {k: [] for k in ["compile winch ms", "compile winch KiB", "compile cranelift ms", "compile cranelift KiB",
                       "cold before ms", "cold before KiB", "cold after ms", "cold after KiB", "upgraded after ms"]}
winch_artifact = None
for r in range(rounds):
    for compiler in ("winch", "cranelift"):
        art = f"{scratch}/compile-{compiler}.cwasm"
        ms, kb = timed([after, "__compile-artifact", "--compiler", compiler, "--artifact", art, "--sha256", digest],
                       stdin=data)
        res[f"compile {compiler} ms"].append(ms)
        res[f"compile {compiler} KiB"].append(kb)
        if compiler == "winch":
            winch_artifact = art
    for which in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
        cache = f"{scratch}/cold-{which}-{r}"
        t0 = time.perf_counter()
        ms, kb = run(before if which == "before" else after, cache)
        res[f"cold {which} ms"].append(ms)
        res[f"cold {which} KiB"].append(kb)
        if which == "after":
            # The Winch artifact's name (its engine's hash), before the
            # background compile removes it.
            winch_name = [os.path.basename(p) for p in artifacts(cache) if p.endswith("-winch.cwasm")]
            res["upgraded after ms"].append(wait_upgraded(cache, t0))
for k, v in res.items():
    print(f"{k:24} {q(v)}")
print("cold after/before, per round", q([a / b for a, b in zip(res["cold after ms"], res["cold before ms"])], "%.3f"))
print("compile winch/cranelift, per round",
      q([a / b for a, b in zip(res["compile winch ms"], res["compile cranelift ms"])], "%.3f"))

# Warm caches: BEFORE's own; AFTER's upgraded one; a Winch-only one.
caches = {"before cranelift": f"{scratch}/cold-before-0", "after cranelift": f"{scratch}/cold-after-0",
          "after winch": f"{scratch}/warm-winch"}
os.makedirs(caches["after winch"], mode=0o700)
upgraded = artifacts(caches["after cranelift"])
assert len(upgraded) == 1 and not upgraded[0].endswith("-winch.cwasm"), upgraded
name = os.path.basename(upgraded[0])
assert winch_name, "no Winch artifact after a cold run"
shutil.copy(winch_artifact, f"{caches['after winch']}/{winch_name[0]}")
with open(f"{caches['after winch']}/{name}.failed", "w") as f:
    f.write("held back by first_start.py: this cache measures Winch's code\n")
bins = {"before cranelift": before, "after cranelift": after, "after winch": after}
for k in bins:
    run(bins[k], caches[k])
warm = {k: [] for k in bins}
order = list(bins)
for r in range(max(rounds * 5, 15)):
    for k in order[r % 3:] + order[:r % 3]:
        warm[k].append(run(bins[k], caches[k])[0])
assert artifacts(caches["after winch"])[0].endswith("-winch.cwasm"), "the Winch cache was upgraded"
for k in warm:
    ratio = [a / b for a, b in zip(warm[k], warm["before cranelift"])]
    print(f"warm {k:17} ms {q(warm[k])}; /before {q(ratio, '%.3f')}")
