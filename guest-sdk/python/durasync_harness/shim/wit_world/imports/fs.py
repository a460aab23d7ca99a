# The harness twin of the `fs` bindings componentize-py generates: the same
# names and signatures, each call served by `durasync harness` (the host's
# own rules) through durasync_harness. Not generated (see durasync_harness/__init__.py).
"""
The durable file-system operations, on capability handles.
"""
from types import TracebackType
from typing import List, Optional, Self

from componentize_py_types import Err

import durasync_harness
from ..imports import types


class Dir:
    """
    A directory the plugin may use: a granted root, or a directory
    beneath one. Paths given to its methods are relative to it.
    """

    def __init__(self, handle: int) -> None:
        self._handle = handle

    def _call(self, call: str, **args):
        return durasync_harness.current().call(call, dir=self._handle, **args)

    def sync(self, path: str, files: List[types.File]) -> types.Report:
        """Raises: `componentize_py_types.Err(wit_world.imports.types.Error)`"""
        wire = [durasync_harness.wire_file(f) for f in files]
        return durasync_harness.report(self._call("sync", path=path, files=wire))

    def write_file(self, path: str, contents: bytes, mode: int) -> types.Report:
        """Raises: `componentize_py_types.Err(wit_world.imports.types.Error)`"""
        wire = durasync_harness.b64(contents)
        return durasync_harness.report(self._call("write-file", path=path, contents=wire, mode=mode))

    def read_file(self, path: str) -> Optional[bytes]:
        """Raises: `componentize_py_types.Err(wit_world.imports.types.Error)`"""
        got = self._call("read-file", path=path)
        return None if got is None else durasync_harness.unb64(got)

    def list_dir(self, path: str) -> List[types.Entry]:
        """Raises: `componentize_py_types.Err(wit_world.imports.types.Error)`"""
        kinds = {k.name.lower(): k for k in types.EntryKind}
        return [types.Entry(e["name"], kinds[e["kind"]]) for e in self._call("list-dir", path=path)]

    def remove(self, path: str) -> bool:
        """Raises: `componentize_py_types.Err(wit_world.imports.types.Error)`"""
        return bool(self._call("remove", path=path))

    def exchange(self, a: str, b: str) -> None:
        """Raises: `componentize_py_types.Err(wit_world.imports.types.Error)`"""
        self._call("exchange", a=a, b=b)

    def fsync(self, path: str) -> None:
        """Raises: `componentize_py_types.Err(wit_world.imports.types.Error)`"""
        self._call("fsync", path=path)

    def open_dir(self, path: str) -> Self:
        """Raises: `componentize_py_types.Err(wit_world.imports.types.Error)`"""
        return Dir(self._call("open-dir", path=path))

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        """Release this resource."""
        self._call("drop")
        return None


def open_root(name: str) -> Dir:
    """Raises: `componentize_py_types.Err(wit_world.imports.types.Error)`"""
    return Dir(durasync_harness.current().call("open-root", name=name))


__all__ = ["Dir", "open_root", "Err"]
