// The JavaScript shim and helper themselves, under Node against `durasync
// harness`: every `fs` method, `log`, and the helper's error text, results,
// quoting and logging (run by tests/plugins/harness.rs).
import assert from "node:assert/strict";
import { test } from "node:test";

import { openRoot } from "durasync:plugin/fs@0.1.0";
import { log } from "durasync:plugin/log@0.1.0";
import * as durasync from "../durasync.js";
import { HarnessTrap, withHarness } from "durasync-guest/harness";

const bytes = (...b) => new Uint8Array(b);

test("every fs method reaches the host", () => {
  withHarness({ roots: ["out"] }, (host) => {
    const root = openRoot("out");
    assert.deepEqual(root.writeFile("a/f", bytes(1, 2), 0o600), { outcome: "created", written: 1, removed: 0 });
    assert.deepEqual(root.readFile("a/f"), bytes(1, 2));
    assert.equal(root.readFile("a/missing"), undefined);
    root.sync("d", [{ name: "x", contents: bytes(0, 255), mode: 0o644 }]);
    assert.deepEqual(root.listDir(""), [{ name: "a", kind: "directory" }, { name: "d", kind: "directory" }]);
    assert.deepEqual(root.openDir("d").readFile("x"), bytes(0, 255));
    root.exchange("a", "d");
    assert.deepEqual(root.readFile("a/x"), bytes(0, 255));
    root.fsync("a");
    assert.equal(root.remove("d"), true);
    assert.equal(root.remove("d"), false);
    log("warn", "careful\n");
    assert.deepEqual(host.logs(), [["warn", "careful\\n"]]);
    assert.deepEqual(host.files("out"), { "a/x": [0o644, Buffer.from([0, 255])] });
    assert.deepEqual(
      host.operations().map((o) => o.op),
      ["write-file", "sync", "exchange", "fsync", "remove", "remove"],
    );
  });
});

test("host errors are thrown with the WIT variant as payload", () => {
  withHarness({ roots: ["out"] }, () => {
    assert.throws(() => openRoot("other"), (e) => e.payload.tag === "not-granted");
    assert.throws(
      () => openRoot("out").openDir("nope"),
      (e) => durasync.errorKind(e) === "not-found" && durasync.errorText(e).startsWith("not-found: "),
    );
  });
});

test("a trap ends the session", () => {
  withHarness({ roots: ["out"], maxCalls: 2 }, () => {
    openRoot("out");
    openRoot("out");
    assert.throws(() => openRoot("out"), (e) => e instanceof HarnessTrap && e.message.includes("more than 2 calls"));
  });
});

test("the helper's run turns failures into thrown strings", () => {
  withHarness({ roots: ["out"] }, (host) => {
    assert.equal(durasync.run(() => "fine"), "fine");
    assert.throws(() => durasync.run(() => { throw new durasync.Fail("mine"); }), (e) => e === "mine");
    assert.throws(() => durasync.run(() => openRoot("x")), (e) => e.startsWith("not-granted: root `x`"));
    assert.throws(() => durasync.run(() => { throw new RangeError("bug"); }), RangeError);
    durasync.info("i");
    durasync.error("e");
    assert.deepEqual(host.logs(), [["info", "i"], ["error", "e"]]);
    assert.equal(durasync.reportText(openRoot("out").writeFile("f", bytes(), 0o644)), "created (1 written, 0 removed)");
  });
});

test("quote is Rust's debug of a string", () => {
  assert.equal(durasync.quote('a"b\\c\td\ne\x01\x7f\x85é'), '"a\\"b\\\\c\\td\\ne\\u{1}\\u{7f}\\u{85}é"');
});
