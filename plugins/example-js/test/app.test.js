// Unit tests of the JavaScript example under Node, against `durasync
// harness` (the host's own rules), no component built:
//
//   DURASYNC=target/debug/durasync node --import ./guest-sdk/js/harness/register.mjs \
//     --test plugins/example-js/test/app.test.js
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";

import { withHarness } from "durasync-guest/harness";
import { run } from "../app.js";

const input = (s) => new TextEncoder().encode(s);
const file = (mode, text) => [mode, Buffer.from(text)];

test("lines become files, then unchanged, then replaced", () => {
  withHarness({ roots: ["out"] }, (host) => {
    assert.equal(run("{}", input("A=1\n# note\n\nB = two\n")), "env: created (2 written, 0 removed)");
    assert.deepEqual(host.files("out"), { "env/A": file(0o644, "1\n"), "env/B": file(0o644, "two\n") });
    assert.equal(run("{}", input("B=two\nA=1")), "env: unchanged (0 written, 0 removed)");
    assert.equal(run("{}", input("A=3")), "env: replaced (1 written, 1 removed)");
    assert.deepEqual(host.files("out"), { "env/A": file(0o644, "3\n") });
    assert.deepEqual(
      host.operations().map((o) => [o.op, o.outcome]),
      [["sync", "created"], ["sync", "unchanged"], ["sync", "replaced"]],
    );
  });
});

test("a line without = fails naming it, and nothing is written", () => {
  withHarness({ roots: ["out"] }, (host) => {
    assert.throws(() => run("{}", input("A=1\noops\n")), (e) => e === 'not KEY=value: "oops"');
    assert.deepEqual(host.files("out"), {});
    assert.deepEqual(host.operations(), []);
  });
});

test("a bad name is the host's invalid-path error, as text", () => {
  withHarness({ roots: ["out"] }, (host) => {
    assert.throws(() => run("{}", input("..=1")), (e) => typeof e === "string" && e.startsWith("invalid-path: "));
    assert.equal(host.operations()[0].outcome, "failed");
  });
});

test("a dry run plans and changes nothing", () => {
  withHarness({ roots: ["out"], dryRun: true }, (host) => {
    assert.equal(run("{}", input("A=1")), "env: created (1 written, 0 removed)");
    assert.deepEqual(host.files("out"), {});
    assert.deepEqual(host.operations()[0].plan.added, ["A"]);
  });
});

test("the manifest's access and limits apply", () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "example-js-"));
  try {
    const manifest = path.join(tmp, "plugin.toml");
    const head = `name = "example-js"\nwasm = "x.wasm"\nsha256 = "${"0".repeat(64)}"\n`;
    fs.writeFileSync(manifest, `${head}[roots.out]\npath = "out"\naccess = "ro"\n`);
    withHarness({ roots: ["out"], manifest }, () => {
      assert.throws(() => run("{}", input("A=1")), (e) => e.startsWith("read-only: root `out`"));
    });
    fs.writeFileSync(manifest, `${head}[roots.out]\npath = "out"\naccess = "rw"\n[limits]\nwrite_files = 1\n`);
    withHarness({ roots: ["out"], manifest }, (host) => {
      assert.throws(() => run("{}", input("A=1\nB=2")), (e) => e.includes("limits.write_files"));
      assert.deepEqual(host.files("out"), {});
    });
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test("no call reaches a host outside a harness", () => {
  assert.throws(() => run("{}", input("A=1")), /no durasync harness is running/);
});
