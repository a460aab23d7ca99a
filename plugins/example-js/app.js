// Turns `KEY=value` lines into an envdir (one file per key, like
// daemontools' `envdir` reads), replaced atomically and durably.
//
// The JavaScript twin of plugins/example: same input, same files, same messages.
// Host errors, results and quoting come from the helper `./durasync.js`
// (guest-sdk/js/durasync.js, copied beside this file by the build).
import { openRoot } from "durasync:plugin/fs@0.1.0";
import * as durasync from "./durasync.js";

export function describe() {
  return {
    name: "example-js",
    version: "0.1.0",
    summary: "Turns KEY=value lines into an envdir, atomically and durably",
    roots: ["out"],
  };
}

// An export's error must be thrown as a string: durasync.run does that.
export function run(config, input) {
  return durasync.run(() => envdir(input));
}

function envdir(input) {
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(input);
  } catch (e) {
    throw new durasync.Fail(`the input is not UTF-8: ${e}`);
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
      throw new durasync.Fail(`not KEY=value: ${durasync.quote(line)}`);
    }
    const key = line.slice(0, eq).trim();
    const value = line.slice(eq + 1).trim();
    files.push({ name: key, contents: encoder.encode(`${value}\n`), mode: 0o644 });
  }
  // One atomic swap: readers see the old envdir or the new one, never a mix.
  const report = openRoot("out").sync("env", files);
  return `env: ${durasync.reportText(report)}`;
}
