"""Unit tests of the Python example under CPython, against `durasync
harness` (the host's own rules), no component built. Run them with the
Python kit installed (`pip install durasync_guest-*.whl`, see
guest-sdk/README.md) or, in a checkout, with guest-sdk/python on the path:

    PYTHONPATH=guest-sdk/python:plugins/example-py \
    DURASYNC=target/debug/durasync python3 -m unittest discover -s plugins/example-py/tests
"""

import os
import tempfile
import unittest

import durasync_harness  # first: it gives CPython the bindings' names

from componentize_py_types import Err

from app import WitWorld
from durasync_harness import Harness

HERE = os.path.dirname(os.path.abspath(__file__))


def run(input: bytes) -> str:
    return WitWorld().run("{}", input)


class EnvdirTest(unittest.TestCase):
    def test_lines_become_files_then_unchanged_then_replaced(self):
        with Harness(roots=["out"]) as host:
            self.assertEqual(run(b"A=1\n# note\n\nB = two\n"), "env: created (2 written, 0 removed)")
            self.assertEqual(host.files("out"), {"env/A": (0o644, b"1\n"), "env/B": (0o644, b"two\n")})
            self.assertEqual(run(b"B=two\nA=1"), "env: unchanged (0 written, 0 removed)")
            self.assertEqual(run(b"A=3"), "env: replaced (1 written, 1 removed)")
            self.assertEqual(host.files("out"), {"env/A": (0o644, b"3\n")})
            ops = host.operations()
            self.assertEqual([(o["op"], o["outcome"]) for o in ops],
                             [("sync", "created"), ("sync", "unchanged"), ("sync", "replaced")])

    def test_a_line_without_equals_fails_naming_it_and_writes_nothing(self):
        with Harness(roots=["out"]) as host:
            with self.assertRaises(Err) as e:
                run(b"A=1\noops\n")
            self.assertEqual(e.exception.value, 'not KEY=value: "oops"')
            self.assertEqual(host.files("out"), {})
            self.assertEqual(host.operations(), [])

    def test_a_bad_name_is_the_hosts_invalid_path_error_as_text(self):
        with Harness(roots=["out"]) as host:
            with self.assertRaises(Err) as e:
                run(b"..=1")
            self.assertTrue(e.exception.value.startswith("invalid-path: "), e.exception.value)
            self.assertEqual(host.operations()[0]["outcome"], "failed")

    def test_a_dry_run_plans_and_changes_nothing(self):
        with Harness(roots=["out"], dry_run=True) as host:
            self.assertEqual(run(b"A=1"), "env: created (1 written, 0 removed)")
            self.assertEqual(host.files("out"), {})
            self.assertEqual(host.operations()[0]["plan"]["added"], ["A"])

    def test_the_manifests_limits_and_access_apply(self):
        with tempfile.TemporaryDirectory() as tmp:
            manifest = os.path.join(tmp, "plugin.toml")
            with open(manifest, "w") as f:
                f.write('name = "example-py"\nwasm = "x.wasm"\nsha256 = "' + "0" * 64 + '"\n'
                        '[roots.out]\npath = "out"\naccess = "ro"\n')
            with Harness(roots=["out"], manifest=manifest) as host:
                with self.assertRaises(Err) as e:
                    run(b"A=1")
                self.assertTrue(e.exception.value.startswith("read-only: root `out`"), e.exception.value)
            with open(manifest, "a") as f:
                f.write("[limits]\nwrite_files = 1\n")
            with open(manifest) as f:
                text = f.read().replace('access = "ro"', 'access = "rw"')
            with open(manifest, "w") as f:
                f.write(text)
            with Harness(roots=["out"], manifest=manifest) as host:
                with self.assertRaises(Err) as e:
                    run(b"A=1\nB=2")
                self.assertIn("limits.write_files", e.exception.value)
                self.assertEqual(host.files("out"), {})

    def test_no_call_reaches_the_host_outside_a_harness(self):
        self.assertIsNone(durasync_harness._current)
        with self.assertRaises(RuntimeError):
            run(b"A=1")


if __name__ == "__main__":
    unittest.main()
