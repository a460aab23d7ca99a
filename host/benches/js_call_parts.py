#!/usr/bin/env python3
"""Where the fuel of a JavaScript `read-file` call goes: the parts of the
call (the import alone, the string encoder, a memory read, the copy of the
result, ...) each run N times in a loop by one plugin
(`host/benches/plugins/calls-js-parts`), fuel per iteration minus the
empty loop's.

    python3 host/benches/js_call_parts.py BINARY [KIT] [N]

KIT is the `durasync-componentize-js` to build with (default: this
checkout's guest-sdk/js/componentize.mjs; give an older copy to compare).
The plugin is built with a copy of KIT that appends to the bindings one
line handing their internals (`$memory`, `$realloc`, `$dealloc`, the raw
`read-file` import, the string encoders, `dataView`) to the plugin; nothing
else changes. componentize-js comes from `target/lang-tools` (run `cargo
test -p durasync --test plugins` once). The parts run once Cranelift's
code is in the compile cache (Winch's code, which a first run uses, counts
other fuel). Fuel varies by less than 0.2 % between runs; no time is
measured."""
import glob, hashlib, os, re, subprocess, sys, time

binary = os.path.abspath(sys.argv[1])
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
kit = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else os.path.join(root, "guest-sdk/js/componentize.mjs")
N = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
out = os.path.join(root, "target/js-call-parts")
source = os.path.join(root, "host/benches/plugins/calls-js-parts/app.js")
found = glob.glob(f"{root}/target/lang-tools/componentize-js-*/node_modules/@bytecodealliance/componentize-js")
if not found:
    sys.exit("no componentize-js under target/lang-tools: run `cargo test -p durasync --test plugins` once")

RETURN = "return { bindings: head + PRELUDE + body, calls };"
PARTS = """
contentGlobal.$parts = { memory: $memory, realloc: $realloc, dealloc: $dealloc,
  readFile: $import_durasync_plugin_fs_0_1_0$dir$method$readFile, encode: _utf8AllocateAndEncode,
  dataView, symbolRscHandle, finalizers: finalizationRegistry_import$fs_0_1_0$dir,
  argRealloc: typeof $argRealloc === "function" ? $argRealloc : undefined,
  freeArgs: typeof $freeArgs === "function" ? $freeArgs : undefined,
  encodeArg: typeof $encodeArg === "function" ? $encodeArg : undefined };
"""
text = open(kit).read()
if RETURN not in text:
    sys.exit(f"{kit} does not end its patch with `{RETURN}`")
os.makedirs(out, exist_ok=True)
tool = f"{out}/kit.mjs"
with open(tool, "w") as f:
    f.write(text.replace(RETURN, "return { bindings: head + PRELUDE + body + PARTS, calls };")
            .replace("const PRELUDE = `", "const PARTS = `" + PARTS.replace("$", "\\$") + "`;\nconst PRELUDE = `", 1))
wasm = f"{out}/parts-{hashlib.sha256(open(tool, 'rb').read() + open(source, 'rb').read()).hexdigest()[:16]}.wasm"
if not os.path.exists(wasm):
    subprocess.run(["node", tool, "--wit", f"{root}/wit", "-n", "plugin", "-d", "http", "fetch-event",
                    "-o", wasm + ".tmp", source], check=True, capture_output=True, cwd=out,
                   env=dict(os.environ, DURASYNC_COMPONENTIZE_JS=max(found, key=os.path.getmtime)))
    os.rename(wasm + ".tmp", wasm)
os.makedirs(f"{out}/data", exist_ok=True)
with open(f"{out}/data/blob", "wb") as f:
    f.write(bytes(i * 7 % 251 for i in range(4096)))
manifest = f"{out}/parts.toml"
with open(manifest, "w") as f:
    f.write(f'name = "js-call-parts"\nwasm = "{wasm}"\nsha256 = "{hashlib.sha256(open(wasm, "rb").read()).hexdigest()}"\n'
            f'[roots.data]\npath = "{out}/data"\naccess = "ro"\n[limits]\nfuel = "unlimited"\ntimeout_ms = 600000\n')


def run(part, n):
    """(fuel, stdout) of one `durasync run` of `part` n times."""
    with open(f"{out}/input", "w") as f:
        f.write(f"{part} {n}")
    p = subprocess.run([binary, "run", manifest, "--input", f"{out}/input", "--cache-dir", f"{out}/cache"],
                       capture_output=True, text=True, env=dict(os.environ, DURASYNC_LOG="durasync=debug"))
    if p.returncode != 0:
        sys.exit(f"{part}: exit {p.returncode}: {p.stdout}{p.stderr[-2000:]}")
    return int(re.findall(r"fuel=(\d+)", p.stderr)[-1]), p.stdout


def on_cranelift():
    """Whether the compile cache holds Cranelift's code for the plugin, and
    no longer Winch's."""
    sha = hashlib.sha256(open(wasm, "rb").read()).hexdigest()
    names = [n for n in os.listdir(f"{out}/cache") if n.startswith(sha) and n.endswith(".cwasm")]
    return bool(names) and not any(n.endswith("-winch.cwasm") for n in names)


run("empty", 0)
waited = time.monotonic()
while not on_cranelift():
    if time.monotonic() - waited > 1800:
        sys.exit("Cranelift's code not in the compile cache after 30 min")
    time.sleep(5)
    run("empty", 0)
base, _ = run("empty", 0)
empty = (run("empty", N)[0] - base) / N
print(f"{os.path.relpath(kit, root)}; {N} iterations; fuel per iteration minus the empty loop's ({empty / 1000:.1f} k)\n")
print("| part | k fuel |\n|---|---|")
parts = [p.strip() for p in run("list", 0)[1].splitlines() if p.strip() and p.strip() != "empty"]
for part in parts:
    if run(part, 0)[1].startswith("absent"):
        print(f"| {part} | not in this kit |")
        continue
    print(f"| {part} | {((run(part, N)[0] - base) / N - empty) / 1000:.1f} |", flush=True)
