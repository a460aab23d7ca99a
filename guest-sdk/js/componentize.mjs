#!/usr/bin/env node
// `durasync-componentize-js`: the componentize-js 0.23.0 CLI (same flags,
// same output) with two changes to the JavaScript bindings it generates for
// the plugin's imports: the memory an import call's arguments were lowered
// into is freed when the call returns, and the calls of the bindings' debug
// log (a no-op outside Node, which still builds an object per call) are
// left out (~18 % of a `readFile` call's fuel).
//
// Why: componentize-js records every allocation of `cabi_realloc` in one
// list that is freed only when the export returns, and the bindings' free
// of a call's results searches that list from its start. Arguments (every
// path is a string) are never freed during the export, so the list grows by
// one entry per host call and each call searches all earlier ones: over a
// run of 40 000 `readFile` calls a call costs 0.68 M fuel on average
// instead of 0.11 M, more the more calls came before. Freeing the
// arguments after the call (the caller owns them; the host copied them
// during the call) keeps the list short and a call's cost flat.
// BENCHMARKS.md, "Host calls per language", has the figures;
// `host/benches/host_calls.py` measures them.
//
// componentize-js is found beside this package (`node_modules/
// @bytecodealliance/componentize-js`), else from the current folder up,
// else at $DURASYNC_COMPONENTIZE_JS (its package folder). Another release
// than 0.23.0, or bindings that do not look like its, are refused: the
// change is made to that release's output.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const PACKAGE = "@bytecodealliance/componentize-js";
const VERSION = "0.23.0";

function fail(message) {
  process.stderr.write(`durasync-componentize-js: ${message}\n`);
  process.exit(1);
}

function packageDir() {
  const given = process.env.DURASYNC_COMPONENTIZE_JS;
  if (given) {
    return given;
  }
  for (const start of [dirname(fileURLToPath(import.meta.url)), process.cwd()]) {
    for (let dir = start; ; dir = dirname(dir)) {
      const candidate = join(dir, "node_modules", PACKAGE);
      if (existsSync(join(candidate, "package.json"))) {
        return candidate;
      }
      if (dirname(dir) === dir) {
        break;
      }
    }
  }
  fail(`cannot find ${PACKAGE}: install it beside durasync-guest, or set DURASYNC_COMPONENTIZE_JS to its folder`);
}

// What the generated bindings of 0.23.0 look like where the change goes.
const AFTER = "delete globalThis.$bindings;\n";
const IMPORT_CALL = /^(\s*)((?:ret = )?\$import_[\w$]+\(.*\);)$/gm;
const EXPORT_START = /^((?:async )?function export_[\w$]+\([^)]*\) \{)$/gm;
const DEBUG_LOG = /_debugLog\('[^']*', \{[^{}]*\}\);/g;
const PRELUDE = `
// durasync-componentize-js: argument memory of an import call, freed when
// the call returns (see durasync-guest/componentize.mjs).
const $argAllocs = [];
function $argRealloc(oldPtr, oldLen, align, newLen) {
  const ptr = $realloc(oldPtr, oldLen, align, newLen);
  $argAllocs.push(ptr, newLen, align);
  return ptr;
}
function $freeArgs() {
  for (let i = 0; i < $argAllocs.length; i += 3) {
    $dealloc($argAllocs[i], $argAllocs[i + 1], $argAllocs[i + 2]);
  }
  $argAllocs.length = 0;
}
`;

/** The bindings with every import call's argument memory freed after it
 * and no debug log calls. */
function patchBindings(bindings) {
  const at = bindings.indexOf(AFTER);
  if (at < 0 || !bindings.includes("$dealloc")) {
    fail(`the bindings this ${PACKAGE} generates are not 0.23.0's (no \`${AFTER.trim()}\` or no $dealloc)`);
  }
  const head = bindings.slice(0, at + AFTER.length);
  let calls = 0;
  let exports = 0;
  const body = bindings
    .slice(at + AFTER.length)
    .replaceAll("$realloc(", "$argRealloc(")
    .replaceAll("$realloc,", "$argRealloc,")
    .replace(DEBUG_LOG, "")
    .replace(IMPORT_CALL, (_, indent, call) => {
      calls += 1;
      return `${indent}${call}\n${indent}$freeArgs();`;
    })
    // The result of an export is lowered with $argRealloc too, and freed by
    // componentize-js when the export returns: forget it when the next
    // export starts, so no import call of that one frees it again.
    .replace(EXPORT_START, (_, start) => {
      exports += 1;
      return `${start}\n  $argAllocs.length = 0;`;
    });
  if (/\$realloc\b/.test(body)) {
    fail("the bindings use $realloc in a way this tool does not know");
  }
  if (exports === 0) {
    fail("found no export function in the generated bindings");
  }
  return { bindings: head + PRELUDE + body, calls };
}

const dir = packageDir();
const version = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).version;
if (version !== VERSION) {
  fail(`${dir} is ${PACKAGE} ${version}; this tool changes the bindings of ${VERSION} only`);
}
const { splicer } = await import(pathToFileURL(join(dir, "lib/spidermonkey-embedding-splicer.js")).href);
const spliceBindings = splicer.spliceBindings;
splicer.spliceBindings = (...args) => {
  const result = spliceBindings(...args);
  const { bindings, calls } = patchBindings(result.jsBindings);
  if (calls === 0 && result.imports.length > 0) {
    fail(`found none of the ${result.imports.length} import calls in the generated bindings`);
  }
  result.jsBindings = bindings;
  return result;
};
await import(pathToFileURL(join(dir, "src/cli.js")).href);
