#!/usr/bin/env python3
"""The agent's memory per plugin language, cold and warm.

For each component given (the example plugin built in Rust, Python,
JavaScript and Go; any component whose `run` takes KEY=value lines and a
root `out` works), the real `durasync agent` starts with one instance of it:

  cold   an empty compile cache: the component is compiled at start
  warm   the same cache again: the artifact is loaded

and is read once its first run has ended (`run ok` / `run failed` on its
log): the agent's peak RSS (`VmHWM` of /proc/PID/status: the most it ever
held) and its steady RSS (`VmRSS` 2 s later). With `--before BINARY`, the
same rows for that binary (an agent that compiles in its own process).
Never asserts on anything.

    python3 host/benches/agent_rss.py BINARY [--before BINARY] NAME=COMPONENT.wasm...
"""
import hashlib, os, subprocess, sys, tempfile, threading, time


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS"):
                out[k] = int(v.split()[0]) / 1024
    return out


def measure(binary, wasm, cache, work):
    sha = hashlib.sha256(open(wasm, "rb").read()).hexdigest()
    conf = os.path.join(work, "agent.d")
    out = os.path.join(work, "out")
    os.makedirs(conf, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    inp = os.path.join(work, "env.txt")
    with open(inp, "w") as f:
        f.write("A=1\nB=2\n")
    with open(os.path.join(conf, "p.toml"), "w") as f:
        f.write(f'name = "p"\nwasm = "{wasm}"\nsha256 = "{sha}"\n[roots.out]\npath = "{out}"\naccess = "rw"\n'
                f'[input]\nfile = "{inp}"\n[schedule]\ninterval = "1h"\n')
    env = dict(os.environ, DURASYNC_LOG="info", NO_COLOR="1")
    p = subprocess.Popen([binary, "agent", "--config-dir", conf, "--cache-dir", cache, "--state-dir",
                          os.path.join(work, "state"), "--start-jitter", "0s"],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, text=True)
    done = threading.Event()
    lines = []

    def read():
        for line in p.stderr:
            lines.append(line)
            if "run ok in" in line or "run failed in" in line:
                done.set()

    threading.Thread(target=read, daemon=True).start()
    t0 = time.time()
    if not done.wait(600):
        p.kill()
        raise SystemExit(f"no run within 600 s: {''.join(lines[-20:])}")
    ready_s = time.time() - t0
    peak = status(p.pid)["VmHWM"]
    time.sleep(2)
    steady = status(p.pid)["VmRSS"]
    p.terminate()
    p.wait(30)
    ok = any("run ok in" in l for l in lines)
    child = any("compiled in a child process" in l for l in lines)
    return peak, steady, ready_s, ok, child


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    args = sys.argv[1:]
    binary, before, comps = os.path.abspath(args[0]), None, []
    rest = iter(args[1:])
    for a in rest:
        if a == "--before":
            before = os.path.abspath(next(rest))
        else:
            name, _, path = a.partition("=")
            comps.append((name, os.path.abspath(path)))
    bins = [("after", binary)] + ([("before", before)] if before else [])
    print("| binary | component | size | cold: peak / steady MiB (first run after) | warm: peak / steady MiB |")
    print("|---|---|---|---|---|")
    for label, b in bins:
        for name, wasm in comps:
            with tempfile.TemporaryDirectory(prefix="durasync-rss-") as work:
                cache = os.path.join(work, "cache")
                cold = measure(b, wasm, cache, os.path.join(work, "cold"))
                warm = measure(b, wasm, cache, os.path.join(work, "warm"))
            size = os.path.getsize(wasm) / 1e6
            note = " (compiled in a child)" if cold[4] else ""
            print(f"| {label} | {name} | {size:.1f} MB | {cold[0]:.0f} / {cold[1]:.0f} ({cold[2]:.1f} s){note}"
                  f" | {warm[0]:.0f} / {warm[1]:.0f} |")


if __name__ == "__main__":
    main()
