"""The ``compile_check`` command placed in every sandbox: compile the kernels without a GPU.

The sandbox has no GPU, so a kernel's compile errors would otherwise first show up in the
feedback of a submission. ``compile_check [FILE] [--arch ARCH]`` imports FILE (default
``solution.py``), picks the DSL from its imports and calls ``solve`` once on the problem's
smoke inputs on the CPU, with the DSL's compile entry point wrapped so that compiled kernels
are kept but never launched. ARCH defaults to the architecture of the task's grading GPU
(``sm_100a`` for the B200, ``sm_90a`` for the H200 and H100: ``problems/targets.py``):

* CuTe DSL: ``cute.compile`` runs for real (``CUTE_DSL_ARCH`` = the arch), to a cubin;
* TIRx: ``tvm.compile`` / ``tvm.build`` run for real with the CUDA target's ``arch`` set to
  ARCH (a solution picks its arch from the GPU it runs on, which the sandbox does not have;
  a different one asked for is reported), then the generated CUDA C of each executable goes
  through NVRTC for the arch (``tvm.support.nvcc.compile_cuda``).

A failure that involves a tensor-core feature the arch lacks (WGMMA on ``sm_100a``; tcgen05
MMA and TMEM on ``sm_90a``) ends with a line naming the feature and what the arch has instead.

NVRTC needs the CUDA headers; when ``CUDA_PATH`` has none, the script points it at a folder
under ``/tmp`` whose ``include`` and ``targets/<triple>/include`` link to the headers of the
pip CUDA wheels (``site-packages/nvidia/cu13/include``; ``nvidia-cuda-cccl`` adds CCCL).
Outputs are not checked (nothing ran). Exit 0 iff ``solve`` returned and at least one kernel
compiled. The script is standalone: it imports only the DSL, torch and the task's vendored
``problems`` helpers.
"""

from __future__ import annotations

COMPILE_CHECK_PATH = "bin/compile_check"  # relative to the task's workdir
DEFAULT_ARCH = "sm_90a"

COMPILE_CHECK_SCRIPT = r'''#!/usr/bin/env python3
"""compile_check [FILE] [--arch ARCH]: compile FILE's CuTe DSL or TIRx kernels on this
CPU-only machine (no launch, outputs not checked) to catch compile errors before you submit."""
import argparse
import ast
import glob
import importlib.util
import os
import platform
import sys
import tempfile
import traceback

WORKSPACE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPILED = []  # CuTe: compiled functions; TIRx: executables


def cuda_headers():
    """The CUDA include folder of the pip wheels (nvidia/cu13/include), or None."""
    for base in sys.path:
        for found in sorted(glob.glob(os.path.join(base, "nvidia", "cu*", "include")))[::-1]:
            if os.path.isfile(os.path.join(found, "cuda_runtime.h")):
                return found
    return None


def ensure_cuda_path():
    """Point CUDA_PATH at headers NVRTC can use (a shim over the pip wheels if needed)."""
    current = os.environ.get("CUDA_PATH")
    if current and os.path.isfile(os.path.join(current, "include", "cuda_runtime.h")):
        return current
    headers = cuda_headers()
    if headers is None:
        return current
    shim = os.path.join(tempfile.gettempdir(), "mkb-cuda-shim-%d" % os.getuid())
    triple = "%s-%s" % (platform.machine(), platform.system().lower())
    for link in ("include", os.path.join("targets", triple, "include")):
        path = os.path.join(shim, link)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.islink(path):
            os.symlink(headers, path)
    os.environ["CUDA_PATH"] = shim
    return shim


# tensor-core features one architecture has and the other lacks: (pattern, name, has, instead)
FEATURES = {
    "sm_90a": [(r"tcgen05|\btmem|blackwell_helpers|sm100|\bumma\b", "tcgen05 MMA (UMMA) and TMEM",
                "Blackwell (sm_100a)", "WGMMA (warpgroup MMA)")],
    "sm_100a": [(r"wgmma|warpgroup|hopper_helpers|sm90_utils|expects arch to be sm_90a",
                 "WGMMA (warpgroup MMA)", "Hopper (sm_90a)", "tcgen05 MMA (UMMA) with TMEM")],
}
ASKED = []  # TIRx target architectures tvm.compile was asked for


def diagnose(arch, failure, source):
    """A line naming the architecture feature behind a failure, or None."""
    import re

    for pattern, name, owner, instead in FEATURES.get(arch, []):
        lacks = "%s does not have it (it has %s instead)" % (arch, instead)
        if re.search(pattern, failure, re.I):
            return "%s is a %s feature: %s" % (name, owner, lacks)
        if re.search(pattern, source, re.I):
            return "(the file also uses %s, a %s feature: %s)" % (name, owner, lacks)
    return None


def retarget(args, kwargs, arch):
    """tvm.compile/build arguments with the CUDA target's arch set to ``arch``."""
    import tvm

    args = list(args)
    given = kwargs.get("target", args[1] if len(args) > 1 else None)
    if given is None:
        return args, kwargs
    target = given if isinstance(given, tvm.target.Target) else tvm.target.Target(given)
    if target.kind.name != "cuda":
        return args, kwargs
    ASKED.append(str(target.attrs.get("arch", "")))
    fixed = tvm.target.Target({**target.export(), "arch": arch})
    if "target" in kwargs or len(args) < 2:
        kwargs = {**kwargs, "target": fixed}
    else:
        args[1] = fixed
    return args, kwargs


class NoLaunch:
    """A compiled kernel or executable that is kept but never launched."""

    def __init__(self, compiled):
        self.compiled = compiled
        COMPILED.append(compiled)

    def __call__(self, *args, **kwargs):
        return None

    def __getitem__(self, name):
        return lambda *args, **kwargs: None

    def __getattr__(self, name):
        return getattr(self.compiled, name)


def wrap(module, name, arch=None):
    real = getattr(module, name, None)
    if real is None or getattr(real, "_mkb_no_launch", False):
        return

    def compile_only(*args, **kwargs):
        if arch is not None:
            args, kwargs = retarget(args, kwargs, arch)
        return NoLaunch(real(*args, **kwargs))

    compile_only._mkb_no_launch = True
    setattr(module, name, compile_only)


def dsl_of(path):
    """"cute" or "tirx", from the modules the file imports."""
    with open(path) as fh:
        tree = ast.parse(fh.read(), path)
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    if "cutlass" in roots:
        return "cute"
    if "tvm" in roots:
        return "tirx"
    raise RuntimeError(path + " imports neither cutlass (CuTe DSL) nor tvm (TIRx)")


def stub_launches(dsl, arch):
    if dsl == "cute":
        import cutlass.cute as cute

        wrap(cute, "compile")
    else:
        import tvm

        wrap(tvm, "compile", arch)
        wrap(tvm, "build", arch)


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report(dsl, arch):
    """One line per compiled kernel; raises when nothing was compiled."""
    lines = []
    if dsl == "cute":
        for fn in COMPILED:
            lines += ["  kernel %s" % name for name in getattr(fn, "kernel_info", {}) or {}]
    else:
        from tvm.support import nvcc

        for exe in COMPILED:
            for dev in getattr(exe, "mod", exe).imports:
                cubin = nvcc.compile_cuda(dev.inspect_source(), target_format="cubin", arch=arch)
                lines.append("  %s module: %d-byte cubin" % (dev.kind, len(cubin)))
    if not lines:
        raise RuntimeError("solve() compiled no kernel: compile_check sees kernels built with "
                           + ("cute.compile(...)" if dsl == "cute" else "tvm.compile(...)"))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("file", nargs="?", default="solution.py")
    parser.add_argument("--arch", default="__ARCH__",
                        help="CUDA architecture (default: the grading GPU's, __ARCH__)")
    parser.add_argument("--workload", default="SMOKE", choices=["SMOKE", "WORKLOAD"])
    args = parser.parse_args(argv)
    os.environ["CUTE_DSL_ARCH"] = args.arch
    ensure_cuda_path()
    sys.path.insert(0, WORKSPACE)
    dsl = "?"
    source = ""
    try:
        with open(args.file) as fh:
            source = fh.read()
        dsl = dsl_of(args.file)
        from problems.spec import Workload

        problem = load(os.path.join(WORKSPACE, "problem.py"), "mkb_problem")
        inputs = problem.make_inputs(0, "cpu", Workload(getattr(problem, args.workload)))
        stub_launches(dsl, args.arch)
        solution = load(os.path.abspath(args.file), "mkb_solution")
        solution.solve(*inputs)
        lines = report(dsl, args.arch)
    except Exception:  # noqa: BLE001 - the whole point is to show it
        failure = traceback.format_exc()
        print(failure, file=sys.stderr)
        why = diagnose(args.arch, failure, source)
        print("compile_check: FAILED for %s (%s, %s)%s"
              % (args.file, dsl, args.arch, ": " + why if why else ""))
        return 1
    print("compile_check: OK, %s compiled for %s on the CPU (nothing launched, outputs "
          "not checked):" % (args.file, args.arch))
    print("\n".join(lines))
    other = sorted({a for a in ASKED if a and a != args.arch})
    if other:
        print("note: tvm.compile was asked for %s and compiled for %s here: on the grading "
              "GPU pick the arch from the device (torch.cuda.get_device_capability())"
              % (", ".join(other), args.arch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def render_compile_check_script(arch: str = DEFAULT_ARCH) -> str:
    """The ``compile_check`` script for a task graded on ``arch`` (the same for both DSLs: it
    reads the file's imports)."""
    return COMPILE_CHECK_SCRIPT.replace("__ARCH__", arch)
