// Makes N `read-file` calls of the 4 KiB file `blob` in the root `data`
// (input: N): the per-call cost of a host call from JavaScript
// (`host/benches/host_calls.py`, beside its Rust, Python and Go twins).
// The message gives the loop's time by the guest's monotonic clock
// (`performance.now()`), all N calls and the first 100.
import { openRoot } from "durasync:plugin/fs@0.1.0";

export function describe() {
  return { name: "bench-calls-js", version: "0", summary: "N read-file calls", roots: ["data"] };
}

export function run(config, input) {
  const calls = Number(new TextDecoder().decode(input).trim());
  const root = openRoot("data");
  let total = 0;
  let start = 0;
  const marks = [performance.now()];
  for (const end of [Math.min(100, calls), calls]) {
    for (let i = start; i < end; i++) {
      const blob = root.readFile("blob");
      if (blob === undefined || blob.length !== 4096) {
        throw `call ${i}: ${blob}`;
      }
      total += blob.length;
    }
    marks.push(performance.now());
    start = end;
  }
  const ns = (ms) => Math.round(ms * 1e6);
  return `${calls} calls, ${total} bytes; in the guest: ${ns(marks[2] - marks[0])} ns, ` +
    `the first 100: ${ns(marks[1] - marks[0])} ns`;
}
