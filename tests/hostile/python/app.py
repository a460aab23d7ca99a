"""A hostile Python plugin: each `--input` names one attempt to reach
something the manifest does not grant. An attempt that raises is returned
as the run's error, `ATTEMPT: ExceptionType: message`, so the operator sees
exactly how it failed; one that traps (memory, time) is reported by the host.

Attempts that cannot fail by design (reading the environment, the
arguments, the clock, randomness) return what the plugin saw, as JSON.
"""

# componentize-py bundles only the modules imported at build time: the
# socket module encodes host names with the idna codec, loaded lazily.
import encodings.idna  # noqa: F401
import json
import os
import socket
import sys
import time

from componentize_py_types import Err
from wit_world import WitWorld as World
from wit_world.imports import fs, plugin_types, types


def attempt(name: str, arg: str) -> str:
    if name == "open":
        with open("/etc/passwd") as f:
            return f.read()
    if name == "write":
        with open("/tmp/durasync-python-escape", "w") as f:
            f.write("escaped")
        return "wrote /tmp/durasync-python-escape"
    if name == "listdir":
        return json.dumps(os.listdir("/"))
    if name == "socket":
        host, port = arg.rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.connect((host, int(port)))
        s.sendall(b"escaped")
        return "connected"
    if name == "resolve":
        return json.dumps(socket.getaddrinfo(arg, 80))
    if name == "environ":
        return json.dumps({"environ": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd()})
    if name == "alloc":
        # 64 MiB at a time up to 4 GiB: far past any memory limit.
        blobs = [bytearray(64 << 20) for _ in range(64)]
        return f"allocated {sum(map(len, blobs))} bytes"
    if name == "sleep":
        time.sleep(3600)
        return "slept an hour"
    if name == "clock-and-random":
        return json.dumps({"time": time.time(), "random": os.urandom(16).hex()})
    if name == "escape-root":
        # Through the host API: the path rules refuse it.
        fs.open_root("data").write_file("../escaped", b"x", 0o644)
        return "wrote ../escaped"
    raise ValueError(f"unknown attempt {name!r}")


class WitWorld(World):
    def describe(self) -> plugin_types.Info:
        summary = "tries to reach files, sockets and memory it was not granted"
        return plugin_types.Info("hostile-py", "0", summary, ["data"])

    def run(self, config: str, input: bytes) -> str:
        name, _, arg = input.decode().strip().partition(" ")
        if name == "uncaught":
            # Not turned into the run's error: the language runtime traps,
            # and the host must show this traceback, not only "threw".
            raise KeyError("uncaught-marker")
        try:
            return attempt(name, arg)
        except Err as e:
            raise Err(f"{name}: host error {e.value}")
        except Exception as e:
            raise Err(f"{name}: {type(e).__name__}: {e}")
