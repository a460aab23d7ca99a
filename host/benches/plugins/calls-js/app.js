// Makes N `read-file` calls of the 4 KiB file `blob` in the root `data`
// (input: N): the per-call cost of a host call from JavaScript
// (`host/benches/host_calls.py`, beside its Rust, Python and Go twins).
import { openRoot } from "durasync:plugin/fs@0.1.0";

export function describe() {
  return { name: "bench-calls-js", version: "0", summary: "N read-file calls", roots: ["data"] };
}

export function run(config, input) {
  const calls = Number(new TextDecoder().decode(input).trim());
  const root = openRoot("data");
  let total = 0;
  for (let i = 0; i < calls; i++) {
    const blob = root.readFile("blob");
    if (blob === undefined || blob.length !== 4096) {
      throw `call ${i}: ${blob}`;
    }
    total += blob.length;
  }
  return `${calls} calls, ${total} bytes`;
}
