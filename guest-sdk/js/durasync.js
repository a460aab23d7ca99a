// Helpers for durasync plugins written in JavaScript: host errors as text
// (`invalid-path: …`, as the Rust SDK prints them), typed results, logging.
//
// A plugin imports it as "./durasync.js": the component build copies this
// file (node_modules/durasync-guest/durasync.js) beside the plugin's sources
// (componentize-js resolves relative imports, not packages), and under Node
// the harness's loader (`durasync-guest/register`) resolves it here.
//
//   import { run, Fail, reportText } from "./durasync.js";
//   export function run(config, input) {
//     return durasync.run(() => `env: ${reportText(openRoot("out").sync("env", files))}`);
//   }
import { log } from "durasync:plugin/log@0.1.0";

/** The plugin's own failure: `run` gives its message as the run's error. */
export class Fail extends Error {}

/** The WIT case name of a host error thrown by an import call, or undefined. */
export function errorKind(e) {
  const v = e && e.payload;
  return v && typeof v.tag === "string" ? v.tag : undefined;
}

/** `kind: message` for a host error, as the Rust SDK prints it; else the error's text. */
export function errorText(e) {
  const v = e && e.payload;
  if (v && typeof v.tag === "string") {
    return `${v.tag}: ${v.val}`;
  }
  if (e instanceof Error) {
    return e.message;
  }
  return String(e);
}

/**
 * Run a plugin's work and turn its end into the export's result: its message
 * on success; on failure a thrown string (what componentize-js needs: anything
 * else traps), a Fail's message or a host error's `kind: message`. Other
 * exceptions propagate.
 */
export function run(body) {
  try {
    return body();
  } catch (e) {
    if (typeof e === "string") throw e;
    if (e instanceof Fail || errorKind(e) !== undefined) throw errorText(e);
    throw e;
  }
}

/** `created (2 written, 0 removed)`. */
export function reportText(report) {
  return `${report.outcome} (${report.written} written, ${report.removed} removed)`;
}

/** Rust's `{:?}` of a string (what the Rust SDK's messages show). */
export function quote(s) {
  let out = '"';
  for (const c of s) {
    const o = c.codePointAt(0);
    if (c === '"' || c === "\\") out += "\\" + c;
    else if (c === "\t") out += "\\t";
    else if (c === "\r") out += "\\r";
    else if (c === "\n") out += "\\n";
    else if (c === "\0") out += "\\0";
    else if (o < 0x20 || o === 0x7f || (o >= 0x80 && o < 0xa0)) out += `\\u{${o.toString(16)}}`;
    else out += c;
  }
  return out + '"';
}

/** Log for the operator (the host caps the volume per run). */
export const debug = (message) => log("debug", message);
/** Log for the operator. */
export const info = (message) => log("info", message);
/** Log for the operator. */
export const warn = (message) => log("warn", message);
/** Log for the operator. */
export const error = (message) => log("error", message);
