// A JavaScript plugin that makes many host calls in one run: the check that
// a host call's cost does not grow with the calls made before it (each one
// must fit the default fuel budget however many came first), and that the
// string arguments of those calls reach the host as their UTF-8.
//
// Input: CALLS, or `strings` (see `strings` below). The root `data` holds `blob` (4 KiB, byte i is i*7 mod 251)
// and `names/` (64 files `n00`…`n63`). Every call reads `blob` and checks
// its length and three of its bytes; every 100th call also lists `names`
// and checks the names. The result counts what was read and listed.
import { openRoot } from "durasync:plugin/fs@0.1.0";
import * as durasync from "./durasync.js";

export function describe() {
  return { name: "js-stress", version: "0", summary: "many host calls in one run", roots: ["data"] };
}

export function run(config, input) {
  const arg = new TextDecoder().decode(input).trim();
  return durasync.run(() => (arg === "strings" ? strings() : stress(arg)));
}

// Paths that are not ASCII, an emoji, lone surrogates (TextEncoder writes
// each as U+FFFD), a path of 25 characters and "": 100 rounds, each reading
// `strings/NAME` for every name, then `""`, then listing `strings`, and
// making two calls whose second path is not a string, so the call throws
// after its first path was lowered. The report is the last round's (every
// round must give the same): what each read gave, in order.
function strings() {
  const names = ["é.txt", "日本語", "🦀.bin", "a\ud800b", "x\udc00", "some/longer/path/name.crt"];
  const root = openRoot("data");
  let first;
  for (let round = 0; round < 100; round++) {
    const lines = names.map((name, i) => {
      const got = root.readFile(`strings/${name}`);
      return `${i}: ${got === undefined ? "absent" : new TextDecoder().decode(got)}`;
    });
    try {
      root.readFile("");
      lines.push(`"": read`);
    } catch (e) {
      lines.push(`"": ${e.payload?.tag ?? e}`);
    }
    lines.push(`list: ${root.listDir("strings").map((e) => e.name).join(" ")}`);
    for (const [a, b] of [["é.txt", 5], ["🦀.bin", undefined]]) {
      try {
        root.exchange(a, b);
        throw new durasync.Fail(`round ${round}: exchange(${a}, ${b}) did not throw`);
      } catch (e) {
        // The bindings' TypeError, of their own realm (not this one's).
        if (e?.name !== "TypeError") {
          throw e;
        }
      }
    }
    const report = lines.join("\n");
    if (first !== undefined && report !== first) {
      throw new durasync.Fail(`round ${round} gave\n${report}\nround 0 gave\n${first}`);
    }
    first = report;
  }
  return first;
}

function stress(arg) {
  const calls = Number(arg);
  if (!Number.isInteger(calls) || calls < 0) {
    throw new durasync.Fail(`not a number of calls: ${durasync.quote(arg)}`);
  }
  const root = openRoot("data");
  let read = 0;
  let listed = 0;
  for (let i = 0; i < calls; i++) {
    const blob = root.readFile("blob");
    if (blob === undefined || blob.length !== 4096) {
      throw new durasync.Fail(`call ${i}: blob is ${blob === undefined ? "absent" : `${blob.length} bytes`}`);
    }
    for (const j of [0, 2048, 4095]) {
      if (blob[j] !== (j * 7) % 251) {
        throw new durasync.Fail(`call ${i}: blob byte ${j} is ${blob[j]}`);
      }
    }
    read += blob.length;
    if (i % 100 === 0) {
      const entries = root.listDir("names");
      entries.forEach((e, j) => {
        const want = `n${String(j).padStart(2, "0")}`;
        if (e.name !== want || e.kind !== "file") {
          throw new durasync.Fail(`call ${i}: entry ${j} is ${durasync.quote(e.name)} (${e.kind}), want ${want}`);
        }
      });
      listed += entries.length;
    }
  }
  return `${calls} calls: ${read} bytes read, ${listed} names listed`;
}
