// Run a durasync plugin's JavaScript under Node against the real host rules:
// `durasync harness` serves every `fs` and `log` call (the host's services
// layer over temporary or given directories, with a manifest's limits, dry
// runs and operation records) as JSON lines.
//
//   withHarness({ roots: ["out"] }, (host) => {
//     run("{}", bytes);
//     assert.deepEqual(host.files("out"), …);
//   });
//
// (or `Harness.start(…)` and `host.close()` by hand).
//
// A plugin's calls are synchronous, so the pipes are two FIFOs read and
// written with synchronous fs calls. The binary is $DURASYNC, else
// `durasync` on PATH.
import { spawn, execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

let active = null;

// The longest answer line read back.
const MAX_ANSWER_BYTES = 64 << 20;

/** The plugin did what the sandbox traps on; the run ends. */
export class HarnessTrap extends Error {}

/** A host error, as componentize-js throws it: `payload` is `{ tag, val }`. */
export class ComponentError extends Error {
  constructor(payload) {
    super(`${payload.tag}: ${payload.val}`);
    this.payload = payload;
  }
}

export function current() {
  if (active === null) {
    throw new Error("no durasync harness is running: call Harness.start(...) first");
  }
  return active;
}

export const b64 = (bytes) => Buffer.from(bytes).toString("base64");
export const unb64 = (text) => new Uint8Array(Buffer.from(text, "base64"));

export class Harness {
  /**
   * roots: root names (fresh temporary directories) or { name: dir };
   * manifest: a plugin.toml whose name, roots' access and limits apply.
   */
  static start({ roots = [], manifest, dryRun = false, maxCalls, durasync } = {}) {
    return new Harness(roots, manifest, dryRun, maxCalls, durasync);
  }

  constructor(roots, manifest, dryRun, maxCalls, durasync) {
    this.tmp = fs.mkdtempSync(path.join(os.tmpdir(), "durasync-harness-"));
    this.roots = {};
    if (Array.isArray(roots)) {
      for (const name of roots) {
        this.roots[name] = path.join(this.tmp, name);
        fs.mkdirSync(this.roots[name]);
      }
    } else {
      Object.assign(this.roots, roots);
    }
    const args = ["harness"];
    if (manifest) args.push(manifest);
    for (const [name, dir] of Object.entries(this.roots)) args.push("--root", `${name}=${dir}`);
    if (dryRun) args.push("--dry-run");
    if (maxCalls !== undefined) args.push("--max-calls", String(maxCalls));
    const req = path.join(this.tmp, ".req");
    const resp = path.join(this.tmp, ".resp");
    execFileSync("mkfifo", [req, resp]);
    // The shell opens the FIFOs in the order this process does: requests
    // first, then answers (each open waits for the other side).
    this.child = spawn("/bin/sh", ["-c", 'exec "$0" "$@" <"$REQ" >"$RESP"', durasync || process.env.DURASYNC || "durasync", ...args], {
      env: { ...process.env, REQ: req, RESP: resp },
      stdio: ["ignore", "ignore", "inherit"],
    });
    this.out = fs.openSync(req, "w");
    this.in = fs.openSync(resp, "r");
    this.pending = Buffer.alloc(0);
    const hello = this.#read();
    if (!hello.ready) throw new HarnessTrap(`durasync harness did not start: ${JSON.stringify(hello)}`);
    this.ready = hello.ready;
    this.previous = active;
    active = this;
  }

  #read() {
    const chunk = Buffer.alloc(64 << 10);
    for (;;) {
      const nl = this.pending.indexOf(10);
      if (nl >= 0) {
        const line = this.pending.subarray(0, nl);
        this.pending = this.pending.subarray(nl + 1);
        return JSON.parse(line.toString("utf8"));
      }
      if (this.pending.length > MAX_ANSWER_BYTES) throw new HarnessTrap("an answer line is too long");
      let n;
      try {
        n = fs.readSync(this.in, chunk, 0, chunk.length, null);
      } catch (e) {
        if (e.code === "EAGAIN") continue;
        throw e;
      }
      if (n === 0) throw new HarnessTrap("durasync harness ended without an answer (see its stderr)");
      this.pending = Buffer.concat([this.pending, chunk.subarray(0, n)]);
    }
  }

  /** One call: its `ok` value; an `err` throws a ComponentError; a trap a HarnessTrap. */
  call(call, args = {}) {
    fs.writeSync(this.out, JSON.stringify({ call, ...args }) + "\n");
    const answer = this.#read();
    if ("ok" in answer) return answer.ok;
    if ("err" in answer) throw new ComponentError({ tag: answer.err.kind, val: answer.err.message });
    throw new HarnessTrap(answer.trap ?? JSON.stringify(answer));
  }

  /** The operations so far, as `durasync run --json` lists them. */
  operations() {
    return this.call("harness:operations");
  }

  /** [level, message] of each message the run's log budget let through. */
  logs() {
    return this.call("harness:logs").map((m) => [m.level, m.message]);
  }

  /** Every regular file under a root: { path: [mode, Buffer] }, without `.durasync*` entries. */
  files(root) {
    const base = this.roots[root];
    const out = {};
    const walk = (dir) => {
      for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
        if (e.name.startsWith(".durasync")) continue;
        const p = path.join(dir, e.name);
        if (e.isDirectory()) walk(p);
        else if (e.isFile()) out[path.relative(base, p)] = [fs.statSync(p).mode & 0o7777, fs.readFileSync(p)];
      }
    };
    walk(base);
    return out;
  }

  /** End the session and remove the temporary roots. */
  close() {
    active = this.previous;
    fs.closeSync(this.out);
    fs.closeSync(this.in);
    fs.rmSync(this.tmp, { recursive: true, force: true });
  }
}

/** Start a session with `options` (see `Harness.start`), call `body(host)`,
 * and close the session however `body` ends. */
export function withHarness(options, body) {
  const host = Harness.start(options);
  try {
    return body(host);
  } finally {
    host.close();
  }
}
