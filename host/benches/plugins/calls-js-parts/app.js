// The parts of a JavaScript `read-file` call, each run N times in a loop
// (input: `PART N`): `host/benches/js_call_parts.py` builds this plugin with
// a copy of `durasync-componentize-js` that also hands the bindings'
// internals to the plugin as `globalThis.$parts`, and gives each part's
// fuel per iteration.
import { openRoot } from "durasync:plugin/fs@0.1.0";

export function describe() {
  return { name: "bench-js-call-parts", version: "0", summary: "parts of a read-file call", roots: ["data"] };
}

export function run(config, input) {
  const text = new TextDecoder().decode(input).trim();
  const part = text.slice(0, text.lastIndexOf(" "));
  const calls = Number(text.slice(text.lastIndexOf(" ") + 1));
  const root = openRoot("data");
  const x = globalThis.$parts;
  const handle = root[x.symbolRscHandle];
  const blob = x.encode("blob", x.realloc, x.memory);
  const nothing = x.encode("nothing", x.realloc, x.memory);
  const scratch = x.realloc(0, 0, 1, 4096);
  let view = new DataView(x.memory.buffer);
  const u32 = (at) => (at + 4 <= view.byteLength ? view : (view = new DataView(x.memory.buffer))).getUint32(at, true);
  const parts = {
    empty: () => 1,
    "bindings: readFile(\"blob\")": () => root.readFile("blob").length,
    "bindings, missing file": () => (root.readFile("nothing") === undefined ? 1 : 0),
    "import (result read, list and return area freed)": () => {
      const ret = x.readFile(handle, blob.ptr, blob.len);
      const ptr = u32(ret + 8), len = u32(ret + 12);
      x.dealloc(ptr, len, 1);
      x.dealloc(ret);
      return len;
    },
    "import of a missing file (return area freed)": () => {
      x.dealloc(x.readFile(handle, nothing.ptr, nothing.len));
      return 1;
    },
    "realloc+dealloc": () => {
      x.dealloc(x.realloc(0, 0, 1, 4), 4, 1);
      return 1;
    },
    "the kit's argument bookkeeping: $argRealloc, then $freeArgs": () => {
      x.argRealloc(0, 0, 1, 4);
      x.freeArgs();
      return 1;
    },
    "encode blob": () => {
      const e = x.encode("blob", x.realloc, x.memory);
      x.dealloc(e.ptr, e.len, 1);
      return 1;
    },
    "encode blob, the pointer returned and the length left in a variable ($encodeArg)": () => {
      const ptr = x.encodeArg("blob");
      x.dealloc(ptr, 12, 1);
      return 1;
    },
    "encode 25 chars": () => {
      const e = x.encode("some/longer/path/name.crt", x.realloc, x.memory);
      x.dealloc(e.ptr, e.len, 1);
      return 1;
    },
    "dataView($memory).getUint32": () => x.dataView(x.memory).getUint32(scratch, true),
    "$memory.buffer": () => (x.memory.buffer ? 1 : 0),
    "copy 4 KiB out": () => new Uint8Array(x.memory.buffer.slice(scratch, scratch + 4096)).length,
    "copy 4 KiB out: Uint8Array.slice": () => new Uint8Array(x.memory.buffer, scratch, 4096).slice().length,
    "copy 4 KiB out: set": () => {
      const out = new Uint8Array(4096);
      out.set(new Uint8Array(x.memory.buffer, scratch, 4096));
      return out.length;
    },
    "finalizer unregister": () => {
      x.finalizers.unregister(root);
      return 1;
    },
    "closure + call": () => {
      function helper(a, b) {
        return b;
      }
      return helper(root, 1);
    },
    "{ tag, val }": () => {
      const o = { tag: "ok", val: 1 };
      return o.val;
    },
  };
  if (part === "list") {
    return Object.keys(parts).join("\n");
  }
  const f = parts[part];
  if (!f) {
    throw `unknown part ${part}`;
  }
  if (part.includes("$encodeArg") && !x.encodeArg) {
    return "absent: this kit has no $encodeArg";
  }
  let total = 0;
  for (let i = 0; i < calls; i++) {
    total += f();
  }
  return `${calls} calls, ${total}`;
}
