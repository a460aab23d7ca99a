// Turns `KEY=value` lines into an envdir (one file per key, like
// daemontools' `envdir` reads), replaced atomically and durably.
//
// The JavaScript twin of plugins/example: same input, same files, same messages.
import { openRoot } from "durasync:plugin/fs@0.1.0";

// `invalid-path: …`, as the Rust SDK prints a host error. A failed import
// call throws an error whose `payload` is the WIT `error` variant.
function errorText(e) {
  const v = e && e.payload;
  if (v && typeof v.tag === "string") {
    return `${v.tag}: ${v.val}`;
  }
  return String(e);
}

export function describe() {
  return {
    name: "example-js",
    version: "0.1.0",
    summary: "Turns KEY=value lines into an envdir, atomically and durably",
    roots: ["out"],
  };
}

// An export's error must be thrown as a string: anything else traps.
export function run(config, input) {
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(input);
  } catch (e) {
    throw `the input is not UTF-8: ${e}`;
  }
  const files = [];
  const encoder = new TextEncoder();
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) {
      continue;
    }
    const eq = line.indexOf("=");
    if (eq < 0) {
      throw `not KEY=value: ${JSON.stringify(line)}`;
    }
    const key = line.slice(0, eq).trim();
    const value = line.slice(eq + 1).trim();
    files.push({ name: key, contents: encoder.encode(`${value}\n`), mode: 0o644 });
  }
  let report;
  try {
    // One atomic swap: readers see the old envdir or the new one, never a mix.
    report = openRoot("out").sync("env", files);
  } catch (e) {
    throw errorText(e);
  }
  return `env: ${report.outcome} (${report.written} written, ${report.removed} removed)`;
}
