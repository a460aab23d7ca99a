"""Helpers for durasync plugins written in Python: host errors as text
(`invalid-path: …`, as the Rust SDK prints them), typed results, logging.

The same module runs inside the component (componentize-py bundles it from
the venv the `durasync-guest` package is installed in) and under CPython
against `durasync harness` (the package `durasync_harness`, whose shim gives
CPython the bindings' names; importing this module without the bindings
loads it).

    import durasync
    from wit_world.imports import fs

    class WitWorld(World):
        def run(self, config: str, input: bytes) -> str:
            return durasync.run(lambda: sync_env(input))

    def sync_env(input: bytes) -> str:
        report = fs.open_root("out").sync("env", files)   # a host error ends the run as "kind: message"
        return f"env: {durasync.report_text(report)}"
"""

from typing import Callable

try:
    import componentize_py_types  # noqa: F401  (the component's generated bindings)
except ImportError:  # under CPython: the harness shim provides the same names
    import durasync_harness  # noqa: F401

from componentize_py_types import Err
from wit_world.imports import log as _log
from wit_world.imports import types


class Fail(Exception):
    """The plugin's own failure: `run` returns its message as the run's error."""


class HostError(Exception):
    """An error the host returned, with its WIT case name as `kind`
    (`invalid-path`, `not-granted`, `read-only`, `not-found`,
    `not-a-directory`, `limit`, `unsupported`, `committed`, `io`)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def error_kind(e: "types.Error") -> str:
    """The WIT case name of a host error: `Error_NotADirectory` -> `not-a-directory`."""
    name = type(e).__name__.removeprefix("Error_")
    return "".join("-" + c.lower() if c.isupper() else c for c in name).lstrip("-")


def error_text(e: "types.Error") -> str:
    """`kind: message`, as the Rust SDK prints a host error."""
    return f"{error_kind(e)}: {e.value}"


def host_error(err: Err) -> HostError:
    """The HostError of an `Err` a host call raised."""
    return HostError(error_kind(err.value), err.value.value)


def run(body: Callable[[], str]) -> str:
    """Run a plugin's work and turn its end into the export's result: its
    message on success; on failure `Err(text)`, where text is a Fail's
    message or a host error's `kind: message`. Anything else propagates
    (the component traps, a unit test sees the exception)."""
    try:
        return body()
    except Fail as e:
        raise Err(str(e))
    except HostError as e:
        raise Err(str(e))
    except Err as e:
        if isinstance(e.value, str):
            raise
        raise Err(error_text(e.value))


def outcome(report: "types.Report") -> str:
    """`unchanged`, `created`, `replaced` or `removed`."""
    return report.outcome.name.lower()


def report_text(report: "types.Report") -> str:
    """`created (2 written, 0 removed)`."""
    return f"{outcome(report)} ({report.written} written, {report.removed} removed)"


def quote(s: str) -> str:
    """Rust's `{:?}` of a string (what the Rust SDK's messages show)."""
    out = ['"']
    for c in s:
        o = ord(c)
        if c in "\"\\":
            out.append("\\" + c)
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif c == "\n":
            out.append("\\n")
        elif c == "\0":
            out.append("\\0")
        elif o < 0x20 or o == 0x7F or 0x80 <= o < 0xA0:
            out.append(f"\\u{{{o:x}}}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def debug(message: str) -> None:
    """Log for the operator (the host caps the volume per run)."""
    _log.log(_log.Level.DEBUG, message)


def info(message: str) -> None:
    """Log for the operator."""
    _log.log(_log.Level.INFO, message)


def warn(message: str) -> None:
    """Log for the operator."""
    _log.log(_log.Level.WARN, message)


def error(message: str) -> None:
    """Log for the operator."""
    _log.log(_log.Level.ERROR, message)
