"""In the runner: ``tvm.tirx.build`` (the TIR path of ``tvm.compile`` and of ``tvm.build``)
loads the library an earlier grading of this source exported for the same input, instead of
compiling it again (``compiled.py``; docs/grading.md, "Compile once per source").

A compile's input is named by :func:`input_name`: the IRModule's TVMScript (constants
included) and structural hash, the target, the pipeline and TVM's version. A miss compiles
as TVM does, then exports the library (``export_library``: a C compiler links it) with the
generated CUDA source beside it (a loaded CUDA module has only its binary, and the kernel
audit reads kernel names from the source). A hit loads a private copy of the delivered
library (``tvm.runtime.load_module``); a library that fails to load is compiled instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from typing import Any

if __package__:
    from engine.grading.runner.compiled import after_import, keep
else:  # in the jail: the runner's files lie side by side
    from compiled import after_import, keep  # type: ignore[import-not-found,no-redef]

SUBDIR = "tvm"


def input_name(tvm: Any, mod: Any, target: Any, pipeline: Any) -> str | None:
    """The name of a compile's input, or None when it cannot be named (a pipeline given as
    a pass object rather than by name)."""
    if pipeline is not None and not isinstance(pipeline, str):
        return None
    import tvm_ffi

    if target is None:
        target_text = "current:" + str(tvm.target.Target.current())
    else:
        target_text = str(tvm.target.Target(target))
    parts = (
        mod.script(show_meta=True),
        str(tvm_ffi.structural_hash(mod)),
        target_text,
        str(pipeline),
        str(tvm.__version__),
    )
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def install(
    folder: str, key: bytes, delivered: dict[str, bytes], names: set[str] | None = None
) -> None:
    """Wrap ``tvm.tirx.build`` once ``tvm`` is imported. ``names``: the launch hooks' set of
    kernel names, given those of a loaded library."""

    def patch(tvm: Any) -> None:
        original = tvm.tirx.build
        load = tvm.runtime.load_module

        def build(mod: Any, target: Any = None, pipeline: Any = "default") -> Any:
            name = None
            with contextlib.suppress(Exception):
                name = input_name(tvm, mod, target, pipeline)
            if name is None:
                return original(mod, target, pipeline)
            library = delivered.get(f"{SUBDIR}/{name}.so")
            if library is not None:
                loaded = _load(load, library)
                if loaded is not None:
                    _add_names(names, delivered.get(f"{SUBDIR}/{name}.cu"))
                    return loaded
            built = original(mod, target, pipeline)
            with contextlib.suppress(Exception):  # no compiler, no space: no reuse, same result
                _export(built, folder, key, name)
            return built

        tvm.tirx.build = build

    after_import("tvm", patch)


def _load(load: Any, data: bytes) -> Any:
    """The library ``data`` loaded from a private copy, or None when it does not load."""
    scratch = tempfile.mkdtemp(prefix="mkb-tvm-")
    try:
        path = os.path.join(scratch, "lib.so")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return load(path)
    except Exception:  # noqa: BLE001 - compiled again instead
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _export(built: Any, folder: str, key: bytes, name: str) -> None:
    """Export what was built, and its CUDA source, as this input's tagged files."""
    cuda = built._collect_from_import_tree(lambda m: m.kind == "cuda")
    source = "\n".join(str(m.inspect_source()) for m in cuda)
    scratch = tempfile.mkdtemp(prefix="mkb-tvm-")
    try:
        path = os.path.join(scratch, "lib.so")
        built.export_library(path)
        with open(path, "rb") as fh:
            data = fh.read()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    keep(folder, key, f"{SUBDIR}/{name}.so", data)
    if source.strip():
        keep(folder, key, f"{SUBDIR}/{name}.cu", source.encode())


def _add_names(names: set[str] | None, source: bytes | None) -> None:
    if names is None or not source:
        return
    if __package__:
        from engine.grading.runner.dsl_hooks import cuda_kernel_names
    else:
        from dsl_hooks import cuda_kernel_names  # type: ignore[import-not-found,no-redef]
    names.update(cuda_kernel_names(source.decode(errors="replace")))
