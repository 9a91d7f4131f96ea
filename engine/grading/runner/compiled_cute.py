"""In the runner: CuTe's file cache reads only this source's delivered entry and writes tagged
files (``compiled.py``; docs/grading.md, "Compile once per source").

CuTe keeps a compiled function as MLIR bytecode named by its module hash in
``CUTE_DSL_CACHE_DIR`` (``cutlass.base_dsl.cache_helpers``). Unwrapped, it would load any
file found there, one the submission wrote itself included. Wrapped (the two names
``cutlass.base_dsl.compile_backend`` calls), a load reads a private copy of the delivered
file or finds nothing, and a dump goes to a private folder first, then is kept with its tag.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any

if __package__:
    from engine.grading.runner.compiled import after_import, keep
else:  # in the jail: the runner's files lie side by side
    from compiled import after_import, keep  # type: ignore[import-not-found,no-redef]

SUBDIR = "cute"
BACKEND = "cutlass.base_dsl.compile_backend"


def file_name(dsl_name: str, module_hash: str) -> str:
    """The cache file CuTe names for a module hash (``cache_helpers.load_cache_from_path``)."""
    return f"{dsl_name.lower()}_{module_hash}.mlir"


def install(folder: str, key: bytes, delivered: dict[str, bytes]) -> None:
    """Wrap CuTe's cache load and dump once its compile backend is imported."""

    def patch(backend: Any) -> None:
        original_load = backend.load_cache_from_path
        original_dump = backend.dump_cache_to_path

        def load_cache_from_path(dsl_name: str, file: str, path: Any = None, **kw: Any) -> Any:
            data = delivered.get(f"{SUBDIR}/{file_name(dsl_name, file)}")
            if data is None:
                return None  # never a file the submission could have put in the cache folder
            scratch = tempfile.mkdtemp(prefix="mkb-cute-")
            try:
                with open(os.path.join(scratch, file_name(dsl_name, file)), "wb") as fh:
                    fh.write(data)
                return original_load(dsl_name, file, scratch, **kw)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)

        def dump_cache_to_path(dsl_name: str, fn: Any, file: str, path: Any = None, **kw: Any):  # type: ignore[no-untyped-def]
            scratch = tempfile.mkdtemp(prefix="mkb-cute-")
            try:
                original_dump(dsl_name, fn, file, scratch, **kw)
                with contextlib.suppress(OSError):
                    with open(os.path.join(scratch, file_name(dsl_name, file)), "rb") as fh:
                        data = fh.read()
                    keep(folder, key, f"{SUBDIR}/{file_name(dsl_name, file)}", data)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)

        backend.load_cache_from_path = load_cache_from_path
        backend.dump_cache_to_path = dump_cache_to_path

    after_import(BACKEND, patch)
