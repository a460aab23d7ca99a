"""The Python shim and helper themselves, under CPython against `durasync
harness`: every `fs` method, `log`, and the helper's error text, results,
quoting and logging (run by tests/plugins/harness.rs)."""

import os
import unittest

import durasync_harness  # first: it gives CPython the bindings' names
from durasync_harness import Harness, HarnessTrap

from componentize_py_types import Err
from wit_world.imports import fs, log, types

import durasync


class ShimTest(unittest.TestCase):
    def test_every_fs_method_reaches_the_host(self):
        with Harness(roots=["out"]) as host:
            root = fs.open_root("out")
            r = root.write_file("a/f", b"one", 0o600)
            self.assertEqual((r.outcome, r.written, r.removed), (types.Outcome.CREATED, 1, 0))
            self.assertEqual(root.read_file("a/f"), b"one")
            self.assertIsNone(root.read_file("a/missing"))
            root.sync("d", [types.File("x", b"\x00\xff", 0o644)])
            self.assertEqual(root.list_dir(""), [types.Entry("a", types.EntryKind.DIRECTORY),
                                                 types.Entry("d", types.EntryKind.DIRECTORY)])
            sub = root.open_dir("d")
            self.assertEqual(sub.read_file("x"), b"\x00\xff")
            root.exchange("a", "d")
            self.assertEqual(root.read_file("a/x"), b"\x00\xff")
            root.fsync("a")
            self.assertTrue(root.remove("d"))
            self.assertFalse(root.remove("d"))
            with root.open_dir("a") as a:
                self.assertEqual([e.name for e in a.list_dir(".")], ["x"])
            log.log(log.Level.WARN, "careful\n")
            self.assertEqual(host.logs(), [("warn", "careful\\n")])
            self.assertEqual(host.files("out"), {"a/x": (0o644, b"\x00\xff")})
            self.assertEqual([o["op"] for o in host.operations()],
                             ["write-file", "sync", "exchange", "fsync", "remove", "remove"])

    def test_host_errors_are_err_of_the_generated_error_types(self):
        with Harness(roots=["out"]):
            with self.assertRaises(Err) as e:
                fs.open_root("other")
            self.assertIsInstance(e.exception.value, types.Error_NotGranted)
            with self.assertRaises(Err) as e:
                fs.open_root("out").open_dir("nope")
            self.assertIsInstance(e.exception.value, types.Error_NotFound)
            self.assertTrue(durasync.error_text(e.exception.value).startswith("not-found: "))
            self.assertEqual(durasync.host_error(e.exception).kind, "not-found")

    def test_a_trap_ends_the_session(self):
        with Harness(roots=["out"], max_calls=2) as host:
            fs.open_root("out")
            fs.open_root("out")
            with self.assertRaises(HarnessTrap) as e:
                fs.open_root("out")
            self.assertIn("more than 2 calls", str(e.exception))

    def test_the_helpers_run_turns_failures_into_err_text(self):
        with Harness(roots=["out"]) as host:
            self.assertEqual(durasync.run(lambda: "fine"), "fine")
            for body, text in [
                (lambda: (_ for _ in ()).throw(durasync.Fail("mine")), "mine"),
                (lambda: fs.open_root("x"), "not-granted: root `x` is not granted"),
                (lambda: (_ for _ in ()).throw(durasync.HostError("limit", "too much")), "limit: too much"),
            ]:
                with self.assertRaises(Err) as e:
                    durasync.run(body)
                self.assertTrue(e.exception.value.startswith(text), e.exception.value)
            with self.assertRaises(ZeroDivisionError):
                durasync.run(lambda: 1 // 0)
            durasync.info("i")
            durasync.error("e")
            self.assertEqual(host.logs(), [("info", "i"), ("error", "e")])
            report = fs.open_root("out").write_file("f", b"", 0o644)
            self.assertEqual(durasync.report_text(report), "created (1 written, 0 removed)")

    def test_quote_is_rusts_debug_of_a_string(self):
        self.assertEqual(durasync.quote('a"b\\c\td\ne\x01\x7f\x85é'), '"a\\"b\\\\c\\td\\ne\\u{1}\\u{7f}\\u{85}é"')


if __name__ == "__main__":
    unittest.main()
