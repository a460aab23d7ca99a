"""Makes N `read-file` calls of the 4 KiB file `blob` in the root `data`
(input: N): the per-call cost of a host call from Python
(`host/benches/host_calls.py`, beside its Rust, JavaScript and Go twins).
The message gives the loop's time by the guest's monotonic clock
(`time.perf_counter_ns`), all N calls and the first 100."""

import time

from wit_world import WitWorld as World
from wit_world.imports import fs, plugin_types


class WitWorld(World):
    def describe(self) -> plugin_types.Info:
        return plugin_types.Info("bench-calls-py", "0", "N read-file calls", ["data"])

    def run(self, config: str, input: bytes) -> str:
        calls = int(input.decode().strip())
        root = fs.open_root("data")
        total = 0
        start = 0
        marks = [time.perf_counter_ns()]
        for end in (min(100, calls), calls):
            for i in range(start, end):
                blob = root.read_file("blob")
                if blob is None or len(blob) != 4096:
                    raise Exception(f"call {i}: {blob!r}")
                total += len(blob)
            marks.append(time.perf_counter_ns())
            start = end
        return (f"{calls} calls, {total} bytes; in the guest: {marks[2] - marks[0]} ns, "
                f"the first 100: {marks[1] - marks[0]} ns")
