// The harness twin of `durasync:plugin/fs@0.1.0` as componentize-js binds
// it: `openRoot(name)` returns a `Dir` with the WIT's methods in camelCase;
// bytes are Uint8Arrays, enums strings; a host error is thrown as an error
// whose `payload` is the WIT variant `{ tag, val }`.
import { current, b64, unb64 } from "./harness.js";

function report(r) {
  return { outcome: r.outcome, written: r.written, removed: r.removed };
}

export class Dir {
  #handle;

  constructor(handle) {
    this.#handle = handle;
  }

  #call(call, args) {
    return current().call(call, { dir: this.#handle, ...args });
  }

  sync(path, files) {
    const wire = files.map((f) => ({ name: f.name, contents: b64(f.contents), mode: f.mode }));
    return report(this.#call("sync", { path, files: wire }));
  }

  writeFile(path, contents, mode) {
    return report(this.#call("write-file", { path, contents: b64(contents), mode }));
  }

  readFile(path) {
    const got = this.#call("read-file", { path });
    return got === null ? undefined : unb64(got);
  }

  listDir(path) {
    return this.#call("list-dir", { path }).map((e) => ({ name: e.name, kind: e.kind }));
  }

  remove(path) {
    return this.#call("remove", { path });
  }

  exchange(a, b) {
    this.#call("exchange", { a, b });
  }

  fsync(path) {
    this.#call("fsync", { path });
  }

  openDir(path) {
    return new Dir(this.#call("open-dir", { path }));
  }

  [Symbol.dispose]() {
    this.#call("drop", {});
  }
}

export function openRoot(name) {
  return new Dir(current().call("open-root", { name }));
}
