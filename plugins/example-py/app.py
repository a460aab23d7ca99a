"""Turns `KEY=value` lines into an envdir (one file per key, like
daemontools' `envdir` reads), replaced atomically and durably.

The Python twin of plugins/example: same input, same files, same messages.
"""

import json

from componentize_py_types import Err
from wit_world import WitWorld as World
from wit_world.imports import fs, plugin_types, types


def error_text(e: types.Error) -> str:
    """`invalid-path: …`, as the Rust SDK prints a host error."""
    kind = type(e).__name__.removeprefix("Error_")
    kebab = "".join("-" + c.lower() if c.isupper() else c for c in kind).lstrip("-")
    return f"{kebab}: {e.value}"


class WitWorld(World):
    def describe(self) -> plugin_types.Info:
        summary = "Turns KEY=value lines into an envdir, atomically and durably"
        return plugin_types.Info("example-py", "0.1.0", summary, ["out"])

    def run(self, config: str, input: bytes) -> str:
        try:
            text = input.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Err(f"the input is not UTF-8: {e}")
        files = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, eq, value = line.partition("=")
            if not eq:
                raise Err(f"not KEY=value: {json.dumps(line)}")
            files.append(types.File(key.strip(), f"{value.strip()}\n".encode(), 0o644))
        try:
            # One atomic swap: readers see the old envdir or the new one, never a mix.
            report = fs.open_root("out").sync("env", files)
        except Err as e:
            raise Err(error_text(e.value))
        outcome = report.outcome.name.lower()
        return f"env: {outcome} ({report.written} written, {report.removed} removed)"
