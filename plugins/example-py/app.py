"""Turns `KEY=value` lines into an envdir (one file per key, like
daemontools' `envdir` reads), replaced atomically and durably.

The Python twin of plugins/example: same input, same files, same messages.
Host errors, results and quoting come from the helper module `durasync`
(guest-sdk/python/durasync.py).
"""

import durasync
from wit_world import WitWorld as World
from wit_world.imports import fs, plugin_types, types


class WitWorld(World):
    def describe(self) -> plugin_types.Info:
        summary = "Turns KEY=value lines into an envdir, atomically and durably"
        return plugin_types.Info("example-py", "0.1.0", summary, ["out"])

    def run(self, config: str, input: bytes) -> str:
        return durasync.run(lambda: envdir(input))


def envdir(input: bytes) -> str:
    try:
        text = input.decode("utf-8")
    except UnicodeDecodeError as e:
        raise durasync.Fail(f"the input is not UTF-8: {e}")
    files = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        if not eq:
            raise durasync.Fail(f"not KEY=value: {durasync.quote(line)}")
        files.append(types.File(key.strip(), f"{value.strip()}\n".encode(), 0o644))
    # One atomic swap: readers see the old envdir or the new one, never a mix.
    report = fs.open_root("out").sync("env", files)
    return f"env: {durasync.report_text(report)}"
