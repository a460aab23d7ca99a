"""Makes N `read-file` calls of the 4 KiB file `blob` in the root `data`
(input: N): the per-call cost of a host call from Python
(`host/benches/host_calls.py`, beside its Rust, JavaScript and Go twins)."""

from wit_world import WitWorld as World
from wit_world.imports import fs, plugin_types


class WitWorld(World):
    def describe(self) -> plugin_types.Info:
        return plugin_types.Info("bench-calls-py", "0", "N read-file calls", ["data"])

    def run(self, config: str, input: bytes) -> str:
        calls = int(input.decode().strip())
        root = fs.open_root("data")
        total = 0
        for i in range(calls):
            blob = root.read_file("blob")
            if blob is None or len(blob) != 4096:
                raise Exception(f"call {i}: {blob!r}")
            total += len(blob)
        return f"{calls} calls, {total} bytes"
