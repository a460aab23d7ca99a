#!/usr/bin/env node
// `durasync-componentize-js`: the componentize-js 0.23.0 CLI (same flags,
// same output) with changes to the JavaScript bindings it generates, each
// keeping what the bindings do and making a host call cheaper:
//
// - The memory an import call's arguments were lowered into is freed when
//   the call returns: a string argument's right after the call, from the
//   encoder's own pointer; any other argument's through a list of the
//   allocations made since the last call.
// - A resource method runs in the method itself instead of in a function
//   the method creates and calls on every call (a closure: ~3 k fuel).
// - The calls of the bindings' debug log (a no-op outside Node, which still
//   builds an object per call) are left out.
// - A string is encoded into memory in one `TextEncoder.encodeInto` call,
//   into an allocation of 3 bytes per UTF-16 code unit (UTF-8's most),
//   instead of first counting its UTF-8 length in a loop over its
//   characters: that loop costs ~2 k fuel per character in StarlingMonkey's
//   interpreter (31 k of a `readFile("blob")` call's 100 k; 85 k for a path
//   of 25 characters). A string argument of an import call is encoded by
//   a function that returns the pointer and leaves the length in a
//   variable, instead of returning a `{ ptr, len }` object the call reads
//   twice.
// - Every read and write of linear memory goes through one cached
//   `DataView`, taken anew only when the address lies past the end of the
//   one cached (the memory grew), instead of a call that reads
//   `$memory.buffer` and compares buffers on every access (~7 k fuel each,
//   four per `readFile`). A buffer of the memory taken before it grew still
//   reads and writes the same memory, up to its own length.
//
// Why the first: componentize-js records every allocation of `cabi_realloc`
// in one list that is freed only when the export returns, and the bindings'
// free of a call's results searches that list from its start. Arguments
// (every path is a string) are never freed during the export, so the list
// grows by one entry per host call and each call searches all earlier ones:
// over a run of 40 000 `readFile` calls a call costs 0.68 M fuel on average
// instead of 0.11 M, more the more calls came before. Freeing the arguments
// after the call (the caller owns them; the host copied them during the
// call) keeps the list short and a call's cost flat.
// BENCHMARKS.md, "Host calls per language", has the figures;
// `host/benches/host_calls.py` measures them.
//
// componentize-js is found beside this package (`node_modules/
// @bytecodealliance/componentize-js`), else from the current folder up,
// else at $DURASYNC_COMPONENTIZE_JS (its package folder). Another release
// than 0.23.0, or bindings that do not look like its, are refused: the
// changes are made to that release's output.
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
const ENCODE = /^function _utf8AllocateAndEncode\(s, realloc, memory\) \{\n[\s\S]*?\n\}\n/m;
const DATA_VIEW = "const dataView = mem => dv.buffer === mem.buffer ? dv : dv = new DataView(mem.buffer);\n";
const MEMORY_ACCESS = /\bdataView\(\$memory\)\.((?:get|set)\w+)\((\w+) \+ (\d+),/g;
// Bytes past an access's address that the cached view must reach: the
// widest access (a 64-bit value).
const WIDEST = 8;
// A string argument lowered for an import call: the encoder's call and
// the two lines that take its pointer and length.
const STRING_ARG = /^([ \t]*)var encodeRes = _utf8AllocateAndEncode\((arg\d+), \$argRealloc, \$memory\);\n\s*var (ptr\d+)= encodeRes\.ptr;\n\s*var (len\d+) = encodeRes\.len;$/gm;
// A resource method as 0.23.0 writes it: a function `helper` taking `this`
// and the arguments, created and called by the method.
const METHOD_HELPER = /^( {2})(\w+)\(([^)]*)\) \{\n {4}function helper\(arg0((?:, arg\d+)*)\) \{\n([\s\S]*?)\n {4}\}\n {4}return helper\(this(?:, )?\3\);\n {2}\}$/gm;
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
// The view every memory access of the bindings uses, reaching $viewEnd;
// taken anew when an access lies past it (the memory grew). Empty until the
// first access, in an export call.
let $view = null;
let $viewEnd = 0;
function $viewTo() {
  const buffer = $memory.buffer;
  $view = new DataView(buffer);
  $viewEnd = buffer.byteLength;
  return $view;
}

// A string argument of an import call, encoded as _utf8AllocateAndEncode
// encodes (the same checks and bytes) into memory from $realloc (freed
// right after the call): returns the pointer and leaves the length in
// $encodedLen, read on the next line.
let $encodedLen = 0;
function $encodeArg(s) {
  if (typeof s !== 'string') {
    throw new TypeError('expected a string, received [' + typeof s + ']');
  }
  if (s.length === 0) {
    $encodedLen = 0;
    return 1;
  }
  const size = s.length * 3;
  const ptr = $realloc(0, 0, 1, size);
  const { read, written } = TEXT_ENCODER_UTF8.encodeInto(s, new Uint8Array($memory.buffer, ptr, size));
  if (read !== s.length) {
    throw new Error('failed to encode whole string');
  }
  $encodedLen = written;
  return ptr;
}
`;

// The string encoder of the bindings with the same checks and result (ptr,
// len), encoding once into the most bytes the string can take.
const FAST_ENCODE = `function _utf8AllocateAndEncode(s, realloc, memory) {
  if (typeof s !== 'string') {
    throw new TypeError('expected a string, received [' + typeof s + ']');
  }
  if (s.length === 0) { return { ptr: 1, len: 0 }; }
  // durasync-componentize-js: UTF-8 takes at most 3 bytes per UTF-16 code
  // unit (a surrogate pair: 4 bytes for 2 units).
  const size = s.length * 3;
  const ptr = realloc(0, 0, 1, size);
  const { read, written } = TEXT_ENCODER_UTF8.encodeInto(
  s,
  new Uint8Array(memory.buffer, ptr, size),
  );
  if (read !== s.length) {
    throw new Error('failed to encode whole string');
  }
  return { ptr, len: written };
}
`;

/** `body` with each import call freeing its string arguments right after
 * it returns, and calling `$freeArgs` only when the function lowered other
 * arguments through `$argRealloc`. Each free happens once: an allocation
 * either is a string argument freed after its call, or is in `$argAllocs`;
 * one the call never reaches (an argument after it throws) is freed by
 * componentize-js when the export returns, as is all `cabi_realloc` memory
 * not freed before. */
function freeArgsAfterCalls(body) {
  let out = "";
  let from = 0;
  let calls = 0;
  for (const match of body.matchAll(IMPORT_CALL)) {
    const [line, lines, call] = match;
    const indent = lines.slice(lines.lastIndexOf("\n") + 1);
    const before = body.slice(from, match.index);
    // The lowering of this call's arguments: its function's code up to the
    // call (no function is defined between an import's arguments and it).
    const start = before.lastIndexOf("function ") + 1;
    const strings = [];
    const lowered = before.slice(start).replace(STRING_ARG, (_, sindent, arg, ptr, len) => {
      strings.push({ arg, ptr, len });
      return `${sindent}var ${ptr} = $encodeArg(${arg});\n${sindent}var ${len} = $encodedLen;`;
    });
    // The encoder allocates 3 bytes per UTF-16 code unit, none for "".
    const frees = strings.map(({ arg, ptr, len }) => `\n${indent}if (${len} !== 0) $dealloc(${ptr}, ${arg}.length * 3, 1);`);
    // Other arguments were lowered through $argRealloc: free them with
    // $freeArgs, after any call with a use of it since the last call (a
    // $freeArgs with nothing recorded frees nothing).
    const code = before.slice(0, start) + lowered;
    const rest = code.includes("$argRealloc") ? `\n${indent}$freeArgs();` : "";
    out += code + `${lines}${call}` + frees.join("") + rest;
    from = match.index + line.length;
    calls += 1;
  }
  return { body: out + body.slice(from), calls };
}

/** The bindings with every import call's argument memory freed after it,
 * no debug log calls, strings encoded in one step, memory accessed through
 * one cached view and resource methods without a per-call closure. */
function patchBindings(bindings) {
  const at = bindings.indexOf(AFTER);
  if (at < 0 || !bindings.includes("$dealloc")) {
    fail(`the bindings this ${PACKAGE} generates are not 0.23.0's (no \`${AFTER.trim()}\` or no $dealloc)`);
  }
  const encoder = bindings.match(ENCODE);
  if (!encoder || !encoder[0].includes("TEXT_ENCODER_UTF8.encodeInto(") || !bindings.includes(DATA_VIEW)) {
    fail(`the bindings this ${PACKAGE} generates are not 0.23.0's (no _utf8AllocateAndEncode or dataView as it writes them)`);
  }
  const head = bindings.slice(0, at + AFTER.length);
  let exports = 0;
  const lowered = bindings
    .slice(at + AFTER.length)
    .replace(ENCODE, () => FAST_ENCODE)
    .replaceAll("$realloc(", "$argRealloc(")
    .replaceAll("$realloc,", "$argRealloc,")
    .replace(DEBUG_LOG, "")
    .replace(MEMORY_ACCESS, (_, method, base, offset) => {
      const end = `${base} + ${Number(offset) + WIDEST}`;
      return `(${end} <= $viewEnd ? $view : $viewTo()).${method}(${base} + ${offset},`;
    })
    // The result of an export is lowered with $argRealloc too, and freed by
    // componentize-js when the export returns: forget it when the next
    // export starts, so no import call of that one frees it again.
    .replace(EXPORT_START, (_, start) => {
      exports += 1;
      return `${start}\n  $argAllocs.length = 0;`;
    });
  if (/\$realloc\b/.test(lowered)) {
    fail("the bindings use $realloc in a way this tool does not know");
  }
  const freed = freeArgsAfterCalls(lowered);
  const calls = freed.calls;
  // The method's code runs as the method: `this` as the helper's first
  // argument, the method's arguments renamed to the helper's.
  const body = freed.body.replace(METHOD_HELPER, (_, indent, name, params, rest, code) => {
    return `${indent}${name}(${rest.slice(2)}) {\n    const arg0 = this;\n${code}\n${indent}}`;
  });
  if (body.includes("function helper(")) {
    fail("the bindings define a resource method in a way this tool does not know");
  }
  if (/\bdataView\(/.test(body)) {
    fail("the bindings access memory in a way this tool does not know");
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
