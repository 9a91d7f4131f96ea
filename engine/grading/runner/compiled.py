"""In the runner: compiled DSL modules reused per source (``judge/compile_cache.py``).

Before the submission's import, :func:`prepare` reads this source's entry from an earlier
grading (a private memfd copy from the judge) into memory, never onto a path the submission
can write, and wraps the DSL's compile so that:

* a compile whose input matches a file of the entry loads that file (from a private copy);
  anything else compiles as usual, and a file that fails to load is compiled instead;
* what a compile produced is written under ``.mkb-compile/`` in the workdir with a tag:
  HMAC-SHA256 under this grading's key (``compile_key`` of the ``load`` message), held only
  in the wrappers' closures. The judge keeps a file only with a valid tag, after a grading
  that passed: a file the submission wrote itself there has none.

TIRx: :mod:`compiled_tvm` (``tvm.tirx.build``, the TIR path of ``tvm.compile`` and
``tvm.build``); CuTe: :mod:`compiled_cute` (its file cache). Imports only the standard
library and its zone's files, like the rest of the runner.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import importlib.abc
import importlib.machinery
import os
import sys
import tarfile
from collections.abc import Callable
from typing import Any

COMPILE_DIR = ".mkb-compile"  # relative to the workdir (the runner's current directory)
TAG = ".tag"  # beside each kept file: its HMAC under the grading's key
MAX_READ = 64 * 2**20


def sign(key: bytes, name: str, data: bytes) -> str:
    """The tag of ``data`` kept as ``name`` (relative to the compile folder)."""
    return hmac.new(key, name.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def unpack(fd: int) -> dict[str, bytes]:
    """The regular files of the archive on ``fd`` (a private copy), by relative name."""
    found: dict[str, bytes] = {}
    with os.fdopen(fd, "rb") as fh, tarfile.open(fileobj=fh, mode="r:") as tar:
        for member in tar.getmembers():
            if member.isfile() and member.size <= MAX_READ:
                data = tar.extractfile(member)
                if data is not None:
                    found[os.path.normpath(member.name)] = data.read()
    return found


def keep(folder: str, key: bytes, name: str, data: bytes) -> None:
    """Write ``data`` as ``folder/name`` with its tag (the judge keeps it if the grading
    passes and the tag still matches the file)."""
    path = os.path.join(folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    with open(path + TAG, "w") as fh:
        fh.write(sign(key, name, data))


def after_import(name: str, callback: Callable[[Any], None]) -> None:
    """Run ``callback(module)`` once ``name`` is imported: now if it is, else right after
    its import (a finder ahead of the others that wraps the module's loader)."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    sys.meta_path.insert(0, _AfterImport(name, callback))


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[Any], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        original, callback = loader.exec_module, self.callback

        def exec_module(module: Any) -> None:
            original(module)
            with contextlib.suppress(Exception):  # an optimisation: it never breaks an import
                callback(module)

        loader.exec_module = exec_module
        return spec


def prepare(message: dict[str, Any], fd: int | None, counter: Any = None) -> None:
    """Install the reuse for the ``load`` message's DSL (nothing without a ``compile_key``):
    ``fd`` holds this source's entry, if an earlier grading left one; ``counter`` the launch
    hooks (kernel names of a loaded TIRx library are handed to it)."""
    delivered = unpack(fd) if fd is not None else {}
    secret = message.pop("compile_key", None)  # held by the wrappers' closures only
    if not isinstance(secret, str) or not secret:
        return
    key = bytes.fromhex(secret)
    folder = os.path.abspath(COMPILE_DIR)
    dsl = message.get("dsl")
    if dsl == "tirx":
        names = getattr(counter, "kernel_names", None)
        _zone("compiled_tvm").install(folder, key, delivered, names)
    elif dsl == "cute":
        _zone("compiled_cute").install(folder, key, delivered)


def _zone(name: str) -> Any:
    """A sibling runner module: the package's, or in the jail the file beside this one."""
    if __package__:
        return importlib.import_module(f"{__package__}.{name}")
    return importlib.import_module(name)
