#!/usr/bin/env python3
"""The example plugin in each language through one host binary: component
size, the build time the test harness recorded, the cold `durasync run`
(empty compile cache: compile + run) with its peak RSS, and warm runs
(cache filled) interleaved, order rotated every round, with their peak RSS.

    python3 host/benches/languages.py BINARY ROUNDS [SCRATCH_DIR]

Components are the ones the tests built: `target/wasm/wasm32-wasip2/release/
example.wasm` (Rust) and the newest `target/lang-tools/components/
example-{py,js,go}-*.wasm` (run `cargo test -p durasync --test plugins`
first). Every language gets the same input and the same granted root; the
output trees are checked equal. Warm-run ratios are per round against
Rust's run of the same round. Never asserts on times."""
import glob, hashlib, os, shutil, statistics, subprocess, sys, time

binary, rounds = os.path.abspath(sys.argv[1]), int(sys.argv[2])
scratch = sys.argv[3] if len(sys.argv) > 3 else "/tmp/durasync-languages"
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
target = os.path.join(root, "target")


def newest(pattern):
    found = [p for p in glob.glob(pattern) if "-default-" not in p]
    if not found:
        sys.exit(f"no component matches {pattern}: run `cargo test -p durasync --test plugins` first")
    return max(found, key=os.path.getmtime)


components = {
    "rust": os.path.join(target, "wasm/wasm32-wasip2/release/example.wasm"),
    "python": newest(f"{target}/lang-tools/components/example-py-*.wasm"),
    "javascript": newest(f"{target}/lang-tools/components/example-js-*.wasm"),
    "go": newest(f"{target}/lang-tools/components/example-go-*.wasm"),
}
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
with open(f"{scratch}/input.txt", "w") as f:
    f.write("".join(f"KEY_{i}=value {i}\n" for i in range(20)))


def manifest(lang):
    wasm = components[lang]
    digest = hashlib.sha256(open(wasm, "rb").read()).hexdigest()
    path = f"{scratch}/{lang}.toml"
    os.makedirs(f"{scratch}/out-{lang}")
    with open(path, "w") as f:
        f.write(f'name = "{lang}"\nwasm = "{wasm}"\nsha256 = "{digest}"\n'
                f'[roots.out]\npath = "{scratch}/out-{lang}"\naccess = "rw"\n')
    return path


def run(lang):
    """One `durasync run`; returns (ms, peak RSS in KiB). Each run is made
    from its own small `python3 -c` parent, which times it and reads its
    peak RSS (`RUSAGE_CHILDREN` of a parent with that one child), so the
    wrapper's own start-up is in neither number."""
    out = subprocess.run(
        [sys.executable, "-c",
         "import resource, subprocess, sys, time\n"
         "t0 = time.perf_counter()\n"
         "subprocess.run(sys.argv[1:], check=True, capture_output=True)\n"
         "ms = (time.perf_counter() - t0) * 1000\n"
         "print(ms, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
         binary, "run", manifests[lang], "--input", f"{scratch}/input.txt",
         "--cache-dir", f"{scratch}/cache-{lang}"],
        check=True, capture_output=True, text=True)
    ms, kb = out.stdout.split()
    return float(ms), int(kb)


def q(xs):
    xs = sorted(xs)
    n = len(xs)
    return statistics.median(xs), xs[max(0, n // 10)], xs[min(n - 1, (9 * n) // 10)]


manifests = {lang: manifest(lang) for lang in components}
version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
print(f"{version}; {os.cpu_count()} cpus; input: 20 KEY=value lines")
cold = {}
for lang in components:
    shutil.rmtree(f"{scratch}/cache-{lang}", ignore_errors=True)
    cold[lang] = run(lang)
trees = {}
for lang in components:
    out = f"{scratch}/out-{lang}"
    trees[lang] = {os.path.relpath(os.path.join(d, n), out): open(os.path.join(d, n), "rb").read()
                   for d, _, names in os.walk(out) for n in names}
if any(t != trees["rust"] for t in trees.values()):
    sys.exit(f"the languages wrote different trees: {trees}")
warm = {lang: [] for lang in components}
rss = {lang: [] for lang in components}
langs = list(components)
for r in range(rounds):
    for lang in langs[r % len(langs):] + langs[:r % len(langs)]:
        ms, kb = run(lang)
        warm[lang].append(ms)
        rss[lang].append(kb)
start = []
for _ in range(rounds):
    t0 = time.perf_counter()
    subprocess.run([binary, "--version"], check=True, capture_output=True)
    start.append((time.perf_counter() - t0) * 1000)
print(f"\n| | {' | '.join(components)} |")
print(f"|---|{'---|' * len(components)}")
row = lambda name, f: print(f"| {name} | {' | '.join(f(lang) for lang in components)} |")


def built(lang):
    if lang == "rust":
        return "(cargo)"
    ms = open(components[lang].rsplit(".", 1)[0] + ".build-ms").read().strip()
    return f"{int(ms) / 1000:.1f} s"


row("component size", lambda l: f"{os.path.getsize(components[l]) / 1e6:.2f} MB")
row("build (recorded by the tests)", built)
row("cold run (compile + run)", lambda l: f"{cold[l][0] / 1000:.2f} s")
row("peak RSS, cold run", lambda l: f"{cold[l][1] / 1024:.0f} MiB")
row(f"warm run, median of {rounds} [p10-p90]", lambda l: "%.1f ms [%.1f-%.1f]" % q(warm[l]))
row("peak RSS, warm run (median)", lambda l: f"{statistics.median(rss[l]) / 1024:.1f} MiB")
row("warm / Rust, per round", lambda l: "%.2f [%.2f-%.2f]" % q([a / b for a, b in zip(warm[l], warm["rust"])]))
print(f"\n`durasync --version` (process start): %.1f ms [%.1f-%.1f]" % q(start))
shutil.rmtree(scratch)
