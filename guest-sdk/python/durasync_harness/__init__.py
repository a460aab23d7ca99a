"""Run a durasync plugin's Python code under CPython against the real host
rules: `durasync harness` serves every `fs` and `log` call (the host's
services layer over temporary or given directories, with a manifest's
limits, dry runs and operation records) as JSON lines over a pipe.

Importing this package puts its `shim` folder first on `sys.path`: it holds
`wit_world` and `componentize_py_types` with the names of the bindings
componentize-py generates, so a plugin's code runs unchanged. Import it
before the plugin and before `wit_world` or `componentize_py_types`:

    import durasync_harness
    from durasync_harness import Harness
    from app import WitWorld

    with Harness(roots=["out"]) as host:
        result = WitWorld().run("{}", b"A=1\\n")
        assert host.files("out") == {"env/A": (0o644, b"1\\n")}

The `durasync` binary is `$DURASYNC`, else `durasync` on `PATH`.
`python3 -m durasync_harness wit` prints the folder holding the WIT
(`durasync.wit`) the component is built against.
"""

import base64
import json
import os
import stat
import subprocess
import sys
import tempfile
from typing import Dict, Iterable, List, Mapping, Optional, Tuple, Union

_HERE = os.path.dirname(os.path.abspath(__file__))

#: The shim's folder (`wit_world`, `componentize_py_types`).
SHIM = os.path.join(_HERE, "shim")
if SHIM not in sys.path:
    sys.path.insert(0, SHIM)

#: The folder holding `durasync.wit`: inside the installed package, or the
#: checkout's `wit/` when this runs from the source tree.
_WIT_DIRS = (os.path.join(_HERE, "wit"), os.path.normpath(os.path.join(_HERE, "..", "..", "..", "wit")))
WIT = next((d for d in _WIT_DIRS if os.path.isfile(os.path.join(d, "durasync.wit"))), _WIT_DIRS[0])

from componentize_py_types import Err

_current: Optional["Harness"] = None

#: The longest answer line read back (a `read-file` of the host's largest
#: read, in base64, with room for the JSON around it).
MAX_ANSWER_BYTES = 64 << 20


class HarnessTrap(Exception):
    """The plugin did what the sandbox traps on (an unknown handle, too much
    data in one call, too many calls): the run ends, as in the component."""


def current() -> "Harness":
    """The harness the plugin's calls go to (the innermost `with Harness`)."""
    if _current is None:
        raise RuntimeError(
            "no durasync harness is running: wrap the plugin call in `with durasync_harness.Harness(...)`"
        )
    return _current


def b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def wire_file(f) -> dict:
    return {"name": f.name, "contents": b64(f.contents), "mode": f.mode}


def report(r: dict):
    from wit_world.imports import types

    return types.Report(types.Outcome[r["outcome"].upper()], r["written"], r["removed"])


def _error(kind: str, message: str):
    from wit_world.imports import types

    name = "Error_" + "".join(part.capitalize() for part in kind.split("-"))
    return getattr(types, name)(message)


class Harness:
    """One `durasync harness` session: a run's grants, limits and records.

    roots: root names (each a fresh temporary directory) or a mapping of
    names to existing directories. manifest: a plugin.toml whose name,
    roots' access and limits apply (its roots are pointed at `roots`).
    """

    def __init__(
        self,
        roots: Union[Iterable[str], Mapping[str, str]] = (),
        manifest: Optional[str] = None,
        dry_run: bool = False,
        max_calls: Optional[int] = None,
        durasync: Optional[str] = None,
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="durasync-harness-")
        if isinstance(roots, Mapping):
            self.roots = {name: str(path) for name, path in roots.items()}
        else:
            self.roots = {}
            for name in roots:
                path = os.path.join(self._tmp.name, name)
                os.mkdir(path)
                self.roots[name] = path
        cmd = [durasync or os.environ.get("DURASYNC", "durasync"), "harness"]
        if manifest is not None:
            cmd.append(manifest)
        for name, path in self.roots.items():
            cmd += ["--root", f"{name}={path}"]
        if dry_run:
            cmd.append("--dry-run")
        if max_calls is not None:
            cmd += ["--max-calls", str(max_calls)]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.ready = self._read()
        if "ready" not in self.ready:
            raise HarnessTrap(f"durasync harness did not start: {self.ready}")
        self.ready = self.ready["ready"]
        self._previous: Optional[Harness] = None

    def __enter__(self) -> "Harness":
        global _current
        self._previous, _current = _current, self
        return self

    def __exit__(self, *exc) -> None:
        global _current
        _current = self._previous
        self.close()

    def close(self) -> None:
        """End the session and remove the temporary roots."""
        if self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait(timeout=60)
        self._proc.stdout.close()
        self._proc.stderr.close()
        self._tmp.cleanup()

    def _read(self) -> dict:
        line = self._proc.stdout.readline(MAX_ANSWER_BYTES + 1)
        if not line.endswith(b"\n"):
            self._proc.kill()
            err = self._proc.stderr.read().decode(errors="replace")
            raise HarnessTrap(f"durasync harness ended without an answer: {err.strip()}")
        return json.loads(line)

    def call(self, call: str, **args):
        """One call of the protocol: its `ok` value; an `err` raises
        `Err(types.Error_…)` as the generated bindings do; a trap raises
        HarnessTrap."""
        self._proc.stdin.write(json.dumps({"call": call, **args}).encode() + b"\n")
        self._proc.stdin.flush()
        answer = self._read()
        if "ok" in answer:
            return answer["ok"]
        if "err" in answer:
            raise Err(_error(answer["err"]["kind"], answer["err"]["message"]))
        raise HarnessTrap(answer.get("trap", answer))

    def operations(self) -> List[dict]:
        """The operations so far, as `durasync run --json` lists them."""
        return self.call("harness:operations")

    def logs(self) -> List[Tuple[str, str]]:
        """(level, message) of each message the run's log budget let through."""
        return [(m["level"], m["message"]) for m in self.call("harness:logs")]

    def files(self, root: str) -> Dict[str, Tuple[int, bytes]]:
        """Every regular file under a root: path -> (permission bits, bytes),
        without the host's own `.durasync*` entries."""
        base = self.roots[root]
        out = {}
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".durasync")]
            for name in filenames:
                if name.startswith(".durasync"):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    out[os.path.relpath(path, base)] = (stat.S_IMODE(os.lstat(path).st_mode), f.read())
        return out
