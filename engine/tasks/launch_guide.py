"""The ``docs/launch.md`` page of a task: the lowest-overhead way to call a compiled kernel.

Every timed call counts the host time until ``solve`` returns, so the Python work around a
launch is part of an agent's result. The page shows, per DSL, how to compile once and call
per ``solve()`` at the least host cost, with the figures measured on the H200. Its code
blocks are complete modules written for the task's grading GPU (the TIRx block names its
architecture); tests/tasks/test_launch_guide.py compiles each one for sm_90a and sm_100a on a
CPU and calls it up to the point where a GPU is needed.
"""

from __future__ import annotations

import re

from engine.tasks.dsls import DslInfo, dsl_info
from problems.targets import DEFAULT_GPU, TARGETS, Target

LAUNCH_GUIDE_FILE = "launch.md"  # inside the task's docs/ folder
CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)

CUTE_CODE = """\
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def _scale_kernel(gx: cute.Tensor, gy: cute.Tensor, alpha: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * 256 + tidx
    if i < gx.shape[0]:
        gy[i] = gx[i] * alpha


@cute.jit
def _scale(mx: cute.Tensor, my: cute.Tensor, alpha: cutlass.Float32):
    blocks = (mx.shape[0] + 255) // 256
    _scale_kernel(mx, my, alpha).launch(grid=[blocks, 1, 1], block=[256, 1, 1])


_COMPILED = {}  # one compiled function per shape and dtype (CuTe compiles shapes in)


def scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
    y = torch.empty_like(x)
    key = (tuple(x.shape), x.dtype)
    fn = _COMPILED.get(key)
    if fn is None:  # first call for this shape: the only from_dlpack and compile
        fn = cute.compile(
            _scale, from_dlpack(x), from_dlpack(y), cutlass.Float32(alpha),
            options="--enable-tvm-ffi",
        )
        _COMPILED[key] = fn
    fn(x, y, alpha)  # every call: torch tensors and Python numbers, straight in
    return y
"""

TIRX_CODE = """\
import torch
import tvm
from tvm.script import tirx as T


@T.prim_func
def _scale(x_ptr: T.handle, y_ptr: T.handle, alpha: T.float32):
    n = T.int32()
    X = T.match_buffer(x_ptr, (n,), "float32")
    Y = T.match_buffer(y_ptr, (n,), "float32")
    T.device_entry()
    cta = T.cta_id([T.ceildiv(n, 256)])
    tx = T.thread_id([256])
    i = cta * 256 + tx
    if i < n:
        Y[i] = X[i] * alpha


_KERNEL = []  # the compiled device function, fetched once


def scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
    if not _KERNEL:  # first call: build once (n is symbolic, so any length fits)
        target = tvm.target.Target({"kind": "cuda", "arch": "__ARCH__"})  # the grader's __GPU__
        exe = tvm.compile(tvm.IRModule({"main": _scale}), target=target, tir_pipeline="tirx")
        _KERNEL.append(exe["main"])
    y = torch.empty_like(x)
    _KERNEL[0](x, y, alpha)  # every call: torch tensors and Python numbers, straight in
    return y
"""

CUTE_GUIDE = f"""\
# Calling a CuTe DSL kernel from `solve` at the least host cost

Each timed call runs from `solve` to a device synchronize, so the host work around a launch
counts. A function compiled by `cute.compile` can be called two ways:

| compiled with | called as | host time per call | end to end |
|---|---|---|---|
| `cute.compile(...)` (default) | `fn(from_dlpack(x), ...)` | 71.5 µs | 155 µs |
| `cute.compile(..., options="--enable-tvm-ffi")` | `fn(x, ...)`, torch tensors | 15.5 µs | 101 µs |

Measured on the H200 for one RMSNorm kernel (p36, one launch per call): the same kernel,
only the call path differs.

The lowest-overhead pattern: compile once per shape with `options="--enable-tvm-ffi"` (the
compile takes `from_dlpack` tensors, as usual), keep the compiled function, and call it on
every `solve` with the torch tensors and plain Python numbers themselves:

```python
{CUTE_CODE}```

- No `from_dlpack`, no `cute.compile` and no direct `@cute.jit` call inside the per-call path.
- Shapes and dtypes of the `from_dlpack` tensors are compiled in; TVM-FFI checks each torch
  tensor at the call and raises on a mismatch, so cache compiled functions by shape.
- Pass torch tensors, not `from_dlpack` wrappers, to a function compiled with TVM-FFI.
- Call the compiled object itself (`fn(...)`): the grader counts launches made that way, on
  either path.
"""

TIRX_GUIDE = f"""\
# Calling a TIRx kernel from `solve` at the least host cost

Each timed call runs from `solve` to a device synchronize, so the host work around a launch
counts. TIRx functions are called through TVM-FFI and take torch tensors directly (DLPack,
no copy). On the H200, p36 (one RMSNorm kernel per call) spent 25 µs of host time per call
this way, about 125 µs end to end.

The lowest-overhead pattern: `tvm.compile` once, fetch the device function once
(`exe["main"]`), keep it, and call it on every `solve` with the torch tensors and plain
Python numbers themselves:

```python
{TIRX_CODE}```

- No `tvm.compile` inside the per-call path. `exe(...)` also works but looks the function
  up again on every call; keep the function instead.
- Symbolic sizes (`n = T.int32()`) are read from the tensors, so one build serves every
  shape; TVM-FFI checks dtype, device and shape at each call. NVRTC compiles the CUDA code at
  the first call, so the first call is slow.
- Call the fetched function itself: the grader counts launches made that way.
"""

GUIDES = {"cute": CUTE_GUIDE, "tirx": TIRX_GUIDE}


def render_launch_guide(dsl: DslInfo, gpu: Target | None = None) -> str:
    """The ``docs/launch.md`` page for one DSL variant graded on ``gpu`` (default: H200)."""
    gpu = gpu or TARGETS[DEFAULT_GPU]
    page = GUIDES[dsl.key].replace("__ARCH__", gpu.arch).replace("__GPU__", gpu.hardware.name)
    return page + (
        f"\nThe grading GPU of this task is an {gpu.describe()}; the figures above were "
        "measured on an NVIDIA H200.\n"
    )


def guide_code(dsl_key: str, gpu: Target | None = None) -> list[str]:
    """The Python code blocks of a DSL's page (each one a complete module)."""
    return CODE_BLOCK.findall(render_launch_guide(dsl_info(dsl_key), gpu))
