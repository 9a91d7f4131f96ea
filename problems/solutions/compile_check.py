"""Compile every reference solution for one architecture on a host without a GPU.

Run with an interpreter that has torch and both DSLs:

    [CUDA_PATH=<toolkit>] DSL_PYTHON -m problems.solutions.compile_check [--arch sm_100a] \\
        [--variants] [p28 ... | path/to/pNN_dsl_x.py ...]

``--arch`` (default sm_90a) is the target; a file is compiled only when its module-level
``ARCHS`` declares that arch (``problems/targets.py``), else it is listed as skipped; a file
without ``ARCHS`` fails. ``--variants`` adds ``variants/*.py`` to the selection. One process
compiles for one arch (CuTe DSL reads ``CUTE_DSL_ARCH`` once, and this module sets it).

Without a ``CUDA_PATH`` that has ``include/cuda_runtime.h``, TIRx's NVRTC step is pointed at
the pip CUDA wheels' headers (a folder of links under the temp directory), as the tasks'
``bin/compile_check`` does.

Each solution is called once on the problem's smoke inputs on the CPU, with the DSL's compile
entry point wrapped so that compiled kernels are kept but their launches do nothing (a launch
needs a GPU). That compiles every kernel (CuTe: ``cute.compile`` to a cubin; TIRx:
``tvm.compile`` with the CUDA target's arch set to the checked one, to CUDA C, then NVRTC to a
cubin for it) and runs the eager glue around them
on CPU tensors, so shape errors there show up too (outputs are garbage, nothing is checked).
Convention the solutions follow: CuTe files keep compiled functions in ``_CACHE`` (a dict),
TIRx files keep executables in ``_EXE`` (a list). Exit 0 iff every file compiled.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib.util
import os
import platform
import sys
import tempfile
import traceback
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def solution_files(only: list[str], variants: bool = False) -> list[Path]:
    """Solution files ``pNN_<dsl>.py`` (with ``variants``: also ``variants/*.py``), optionally
    restricted to problem ids; arguments ending in ``.py`` name files directly
    (``variants/pNN_<dsl>_<what>.py``)."""
    paths = [Path(o) for o in only if o.endswith(".py")]
    ids = [o for o in only if not o.endswith(".py")]
    if paths and not ids:
        return paths
    files = sorted(HERE.glob("p[0-9][0-9]_*.py"))
    if variants:
        files += sorted((HERE / "variants").glob("p[0-9][0-9]_*_*.py"))
    return paths + [f for f in files if not ids or f.name.split("_")[0] in ids]


def declares(path: Path, arch: str) -> bool:
    """Whether the file's ``ARCHS`` names ``arch`` (ValueError when it declares none)."""
    from problems.targets import declared_archs

    archs = declared_archs(path.read_text(encoding="utf-8"))
    if archs is None:
        raise ValueError(f"{path.name} declares no ARCHS (e.g. ARCHS = ('sm_90a', 'sm_100a'))")
    return arch in archs


class _NoLaunch:
    """A compiled kernel that keeps its metadata but does not launch."""

    def __init__(self, compiled: object) -> None:
        self.compiled = compiled
        self.kernel_info = getattr(compiled, "kernel_info", {})

    def __call__(self, *args: object, **kwargs: object) -> None:
        return None


class _TirxNoLaunch:
    """A TIRx executable whose functions do not launch; ``mod`` is the real module."""

    def __init__(self, exe: object) -> None:
        self.mod = exe.mod  # type: ignore[attr-defined]

    def __getitem__(self, name: str) -> _NoLaunch:
        return _NoLaunch(None)

    def __call__(self, *args: object) -> None:
        return None


def _retarget(args: tuple, kwargs: dict, arch: str) -> tuple[tuple, dict]:
    """``tvm.compile`` arguments with a CUDA target's arch set to ``arch`` (the solutions pick
    their arch from the GPU, and there is none here)."""
    import tvm

    given = kwargs.get("target", args[1] if len(args) > 1 else None)
    if given is None:
        return args, kwargs
    target = given if isinstance(given, tvm.target.Target) else tvm.target.Target(given)
    if target.kind.name != "cuda":
        return args, kwargs
    fixed = tvm.target.Target({**target.export(), "arch": arch})
    if "target" in kwargs or len(args) < 2:
        return args, {**kwargs, "target": fixed}
    return (args[0], fixed, *args[2:]), kwargs


def stub_launches(dsl: str, arch: str = "sm_90a") -> None:
    """Wrap the DSL's compile entry point so compiled kernels never launch (TIRx: and are
    built for ``arch``; CuTe takes its arch from ``CUTE_DSL_ARCH``)."""
    if dsl == "cute":
        import cutlass.cute as cute

        real = cute.compile
        if not getattr(real, "_no_launch", False):

            def compile_only(*args: object, **kwargs: object) -> _NoLaunch:
                return _NoLaunch(real(*args, **kwargs))

            compile_only._no_launch = True  # type: ignore[attr-defined]
            cute.compile = compile_only
    else:
        import tvm

        real_tvm = tvm.compile
        if not getattr(real_tvm, "_no_launch", False):

            def build_only(*args: object, **kwargs: object) -> _TirxNoLaunch:
                args, kwargs = _retarget(args, kwargs, arch)
                return _TirxNoLaunch(real_tvm(*args, **kwargs))

            build_only._no_launch = True  # type: ignore[attr-defined]
            tvm.compile = build_only


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"solution_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_one(path: Path, arch: str = "sm_90a") -> str:
    """Compile one solution for ``arch``; returns a one-line summary (raises on failure)."""
    from problems.registry import get

    problem_id, dsl = path.stem.split("_")[:2]  # variants: pNN_<dsl>_<what>.py
    problem = get(problem_id)
    inputs = problem.module.make_inputs(0, "cpu", problem.smoke)
    stub_launches(dsl, arch)
    module = load(path)
    module.solve(*inputs)
    if dsl == "cute":
        compiled = list(module._CACHE.values())
        if not compiled:
            raise RuntimeError("no CuTe function was compiled")
        names = [name for fn in compiled for name in fn.kernel_info]
        return f"{len(names)} kernel(s): {', '.join(n[:40] for n in names)}"
    from tvm.support import nvcc

    executables = list(module._EXE)
    if not executables:
        raise RuntimeError("no TIRx executable was built")
    sizes = []
    for exe in executables:
        for dev_mod in exe.mod.imports:
            source = dev_mod.inspect_source()
            sizes.append(len(nvcc.compile_cuda(source, target_format="cubin", arch=arch)))
    return f"{len(sizes)} cubin(s) {sizes} bytes"


def ensure_cuda_path() -> str | None:
    """A ``CUDA_PATH`` whose headers NVRTC can use: the given one, else links to the headers
    of the pip CUDA wheels (``site-packages/nvidia/cu*/include``), else None."""
    current = os.environ.get("CUDA_PATH")
    if current and os.path.isfile(os.path.join(current, "include", "cuda_runtime.h")):
        return current
    found = [
        inc
        for base in sys.path
        for inc in sorted(glob.glob(os.path.join(base, "nvidia", "cu*", "include")))[::-1]
        if os.path.isfile(os.path.join(inc, "cuda_runtime.h"))
    ]
    if not found:
        return current
    shim = os.path.join(tempfile.gettempdir(), f"mkb-cuda-headers-{os.getuid()}")
    triple = f"{platform.machine()}-{platform.system().lower()}"
    for link in ("include", os.path.join("targets", triple, "include")):
        path = os.path.join(shim, link)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not (os.path.islink(path) and os.readlink(path) == found[0]):
            # a link left by another environment (perhaps gone since) is replaced, atomically:
            # two compile checks (one per arch) may run at once
            tmp = f"{path}.{os.getpid()}"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            os.symlink(found[0], tmp)
            os.replace(tmp, path)
    os.environ["CUDA_PATH"] = shim
    return shim


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="problem ids (default: all)")
    parser.add_argument("--arch", default="sm_90a", help="sm_90a (default) or sm_100a")
    parser.add_argument("--variants", action="store_true", help="also variants/*.py")
    args = parser.parse_args(argv)
    os.environ["CUTE_DSL_ARCH"] = args.arch
    ensure_cuda_path()
    failed = 0
    for path in solution_files(args.only, args.variants):
        try:
            if not declares(path, args.arch):
                print(f"skip {path.name}: does not declare {args.arch}", flush=True)
                continue
            print(f"ok   {path.name}: {check_one(path, args.arch)}", flush=True)
        except Exception:  # noqa: BLE001 - report and go on
            failed += 1
            print(f"FAIL {path.name}:\n{traceback.format_exc()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
