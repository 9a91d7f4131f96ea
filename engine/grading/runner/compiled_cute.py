"""In the runner: CuTe's compiles reuse only this source's delivered entry and write tagged
files (``compiled.py``; docs/grading.md, "Compile once per source").

CuTe keeps a compiled function as MLIR bytecode named by its module hash in
``CUTE_DSL_CACHE_DIR`` (``cutlass.base_dsl.cache_helpers``). Unwrapped, it would load any
file found there, one the submission wrote itself included. Wrapped (the two names
``cutlass.base_dsl.compile_backend`` calls), a load reads a private copy of the delivered
file or finds nothing, and a dump goes to a private folder first, then is kept with its tag.

``cute.compile`` (every CuTe solution's entry) turns CuTe's cache off, so CuTe never calls
those two for it: :func:`reuse_compile` wraps the compile backend's ``compile`` too, and for
a compile with no module hash names the file by :func:`module_key` (CuTe's own module hash of
the traced module, plus the TVM-FFI argument checks the compile adds after its passes), loads
it through the same delivered-only load and builds the function from it as CuTe's cache hit
does (the lowered module, JIT-ed without running the passes again), or compiles as usual
(also when the loaded file fails to build) and keeps what it compiled with its tag.
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

SUBDIR = "cute"
BACKEND = "cutlass.base_dsl.compile_backend"


def file_name(dsl_name: str, module_hash: str) -> str:
    """The cache file CuTe names for a module hash (``cache_helpers.load_cache_from_path``)."""
    return f"{dsl_name.lower()}_{module_hash}.mlir"


def install(folder: str, key: bytes, delivered: dict[str, bytes]) -> None:
    """Wrap CuTe's cache load and dump, and its compile, once its compile backend is imported."""

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
        reuse_compile(backend)

    after_import(BACKEND, patch)


def reuse_compile(backend: Any) -> None:
    """Wrap ``CompilerBackend.compile`` so that a compile CuTe does not cache itself (no
    module hash: ``cute.compile``) loads and dumps through the backend's (wrapped) cache
    functions under :func:`module_key`."""
    base = backend.CompilerBackend
    original = base.compile

    def compile(self: Any, ctx: Any) -> Any:  # noqa: A001 (the method it wraps)
        if ctx.cache_enabled or ctx.module_hash is not None:
            return original(self, ctx)  # CuTe's own cache path: the load and dump wrapped
        try:
            name = module_key(self._dsl, ctx)
        except Exception:  # an optimisation: a key it cannot compute compiles as usual
            return original(self, ctx)
        loaded = backend.load_cache_from_path(
            self._dsl.name, name, bytecode_reader=backend.read_bytecode_and_check_crc32
        )
        if loaded is not None and loaded.ir_module is not None:
            with contextlib.suppress(Exception):  # a file that fails to build is compiled
                return _from_loaded(self, backend, ctx, loaded.ir_module)
        fn = original(self, ctx)
        if getattr(fn, "ir_module", None) is not None:
            backend.dump_cache_to_path(
                self._dsl.name,
                fn,
                name,
                bytecode_writer=lambda f: backend.write_bytecode_with_crc32(f, fn.ir_module),
            )
        return fn

    base.compile = compile


def module_key(dsl: Any, ctx: Any) -> str:
    """The file's name for a compile: CuTe's module hash of the traced module (its bytecode,
    the compile-affecting settings and options), with the TVM-FFI checks of the arguments
    mixed in when the compile attaches them (device, dtype, alignment: not all in the traced
    module), and the pipeline and the target arch it compiles with (CuTe's hash leaves out
    a pipeline given to ``cute.compile``), so a function is never built from a file made for
    other arguments or another lowering."""
    if not isinstance(ctx.pipeline, (str, type(None))):
        raise ValueError("a pipeline that is not a string is not named")
    arch = dsl.compile_options.gpu_arch or dsl.envar.arch or ""
    digest = hashlib.sha256(dsl.get_module_hash(ctx.module, ctx.function_name).encode())
    digest.update(f"\0{ctx.pipeline!r}\0{arch}".encode())
    if getattr(dsl.compile_options, "enable_tvm_ffi", False):
        converter = getattr(dsl, "_tvm_ffi_args_spec_converter", None)
        if converter is None:  # CuTe attaches it before the compile: no key without it
            raise ValueError("no TVM-FFI argument checks to name")
        params = converter(ctx.function_name, ctx.sig, ctx.full_args, ctx.full_kwargs)[0]
        digest.update(_describe(params).encode())
    return digest.hexdigest()


def _describe(value: Any, depth: int = 0) -> str:
    """A text that depends on ``value``'s contents only (never on object addresses); the
    key's part for the TVM-FFI argument checks (``spec.Tensor``: name, shape, dtype,
    alignment, device)."""
    if depth > 8:
        raise ValueError("argument checks nested too deep to name")
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_describe(v, depth + 1) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted(value.items())
        return "{" + ",".join(f"{k}:{_describe(v, depth + 1)}" for k, v in items) + "}"
    if hasattr(value, "__dict__") and not callable(value):
        fields = {k: v for k, v in vars(value).items() if not callable(v)}
        return type(value).__qualname__ + _describe(fields, depth + 1)
    text = repr(value)
    if " at 0x" in text:
        raise ValueError(f"no stable name for {type(value).__qualname__}")
    return f"{type(value).__qualname__}:{text}"


def _from_loaded(self: Any, backend: Any, ctx: Any, module: Any) -> Any:
    """The function built from a loaded (lowered) module: CuTe's own cache-hit path."""
    self._validate_compile(ctx)
    arch = self._resolve_compile_gpu_arch()
    self._validate_execution_target(arch)
    state = backend.CompileCacheState(module=module, cache_hit=True, load_from_file_cache=True)
    return self._build_compiled_function(ctx, arch, state)
