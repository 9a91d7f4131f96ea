"""Static rules: what they flag (with line numbers and stable codes) and what they let through."""

from __future__ import annotations

import pytest

from engine.grading.rules.static import check_source, first_reason, fold_str

HONEST_CUTE = """
import torch
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack
import cuda.bindings.driver as cuda


@cute.kernel
def add_kernel(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    c[bidx * 128 + tidx] = a[bidx * 128 + tidx] + b[bidx * 128 + tidx]


@cute.jit
def add(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor):
    add_kernel(a, b, c).launch(grid=(a.shape[0] // 128, 1, 1), block=(128, 1, 1))


_compiled = {}


def solve(x, y):
    out = torch.empty_like(x)
    key = (x.shape, x.dtype)
    if key not in _compiled:
        _compiled[key] = cute.compile(add, from_dlpack(x), from_dlpack(y), from_dlpack(out))
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    _compiled[key](from_dlpack(x), from_dlpack(y), from_dlpack(out))
    return out
"""

HONEST_TIRX = """
import torch
import tvm
from tvm.script import tirx as T


@T.prim_func
def add(a: T.handle, b: T.handle, c: T.handle):
    A = T.match_buffer(a, (1024,), "float32")
    B = T.match_buffer(b, (1024,), "float32")
    C = T.match_buffer(c, (1024,), "float32")
    for i in T.thread_binding(1024, thread="threadIdx.x"):
        C[i] = A[i] + B[i]


_exe = tvm.compile(add, target={"kind": "cuda", "arch": "sm_90a"}, tir_pipeline="tirx")


def solve(x, y):
    out = torch.empty_like(x)
    _exe(x, y, out)
    return out
"""


@pytest.mark.parametrize("source", [HONEST_CUTE, HONEST_TIRX], ids=["cute", "tirx"])
def test_honest_dsl_sources_pass(source: str) -> None:
    assert check_source(source) == []


CASES = [
    ("import triton\n", "rule.other_language", 1),
    ("import numba.cuda\n", "rule.other_language", 1),
    ("from cffi import FFI\n", "rule.other_language", 1),
    ("import pycuda.driver\n", "rule.other_language", 1),
    ("import ctypes as c\n", "rule.other_language", 1),
    ("import subprocess\n", "rule.other_language", 1),
    ("import torch\n\nf = torch.jit.script(lambda x: x)\n", "rule.other_language", 3),
    ("import torch\n\n@torch.compile\ndef f(x):\n    return x\n", "rule.other_language", 3),
    ("from torch import compile as c\n", "rule.other_language", 1),
    ("import torch\nt = torch\nk = t.utils.cpp_extension\n", "rule.other_language", 3),
    ("from cuda.bindings import nvrtc\n", "rule.other_language", 1),
    ("import cuda.bindings.driver as d\nd.cuModuleLoadData(b'')\n", "rule.other_language", 2),
    ("import tvm_ffi.cpp\n", "rule.other_language", 1),
    ("import os\nos.system('nvcc')\n", "rule.other_language", 2),
    ("import torch\ng = torch.cuda.CUDAGraph()\n", "rule.cuda_graph", 2),
    ("import torch\nwith torch.cuda.graph(g):\n    pass\n", "rule.cuda_graph", 2),
    ("from torch.cuda import make_graphed_callables\n", "rule.cuda_graph", 1),
    ("def solve(*a):\n    return reference(*a)\n", "rule.reference_call", 2),
    ("def solve(*a):\n    return make_inputs(0)\n", "rule.reference_call", 2),
    ("import problems.registry\n", "rule.reference_call", 1),
    ("from engine.grading import worker\n", "rule.reference_call", 1),
    ("import importlib\nm = importlib.import_module('probl' + 'ems')\n", "rule.reference_call", 2),
    ("x = getattr(m, 'make_' + 'inputs')\n", "rule.reference_call", 1),
    ("from cutlass.operators import get_operators\n", "rule.dsl_library", 1),
    ("import quack\n", "rule.dsl_library", 1),
    ("from flash_attn.cute import flash_attn_func\n", "rule.dsl_library", 1),
    ("import flashinfer\n", "rule.dsl_library", 1),
    ("from tvm import relax\n", "rule.dsl_library", 1),
    ("import tvm.topi\n", "rule.dsl_library", 1),
    ("import tvm\nx = tvm.contrib.cublas\n", "rule.dsl_library", 2),
    (
        "from tvm.script import tirx as T\nT.cuda.func_call('f', source_code='s')\n",
        "rule.inline_source",
        2,
    ),
    ("def f(**k):\n    pass\nf(**{'source_' + 'code': 1})\n", "rule.inline_source", 3),
    ("from tvm.script import tirx as T\nT.call_kernel(k, (1, 1), x)\n", "rule.inline_source", 2),
    ("import cutlass.cute as cute\ncute.arch.inline_ptx('ret;')\n", "rule.inline_source", 2),
    (
        "from cutlass._mlir.dialects import llvm\nllvm.inline_asm(t, [], 'ret;', '')\n",
        "rule.inline_source",
        2,
    ),
    ("import cutlass.cute as cute\ncute.runtime.load_module('k.so')\n", "rule.inline_source", 2),
    ("import cutlass.cute as cute\ncute.ffi(name='f', source=None)\n", "rule.inline_source", 2),
    ("from cutlass.base_dsl.ffi import BitCode\n", "rule.inline_source", 1),
    ("k = '__global__ void k() {}'\n", "rule.inline_source", 1),
    ("exec('x = 1')\n", "rule.dynamic_code", 1),
    ("y = eval('1')\n", "rule.dynamic_code", 1),
    ("m = __import__(name)\n", "rule.dynamic_code", 1),
    ("import importlib\nm = importlib.import_module(name)\n", "rule.dynamic_code", 1),
    ("v = getattr(obj, name)\n", "rule.dynamic_code", 1),
    ("import sys\nf = sys._getframe(1)\n", "rule.dynamic_code", 2),
    ("import gc\n", "rule.dynamic_code", 1),
    ("import pickle\n", "rule.dynamic_code", 1),
    ("g = globals()\n", "rule.dynamic_code", 1),
    ("def f(fn):\n    return fn.__globals__\n", "rule.dynamic_code", 2),
    ("import torch\nm = [torch]\n", "rule.dynamic_code", 2),
    ("f = open('/proc/1/mem', 'rb')\n", "rule.dynamic_code", 1),
    ("import signal\n", "rule.dynamic_code", 1),
]


@pytest.mark.parametrize(
    ("source", "code", "line"), CASES, ids=[c[1] + f"-{i}" for i, c in enumerate(CASES)]
)
def test_rule_flags_with_code_and_line(source: str, code: str, line: int) -> None:
    findings = check_source(source)
    assert first_reason(findings) == code, findings
    assert any(f.code == code and f.line == line for f in findings), findings


def test_size_limit_counts_bytes() -> None:
    big = "def solve(x):\n    return x\n" + "# " + "é" * (160 * 1024) + "\n"  # 2 bytes each
    assert first_reason(check_source(big)) == "rule.size"
    assert check_source("def solve(x):\n    return x\n" + "#" * (200 * 1024) + "\n") == []


def test_syntax_error_reports_line() -> None:
    findings = check_source("x = 1\ny = (\n")
    assert [f.code for f in findings] == ["rule.syntax"]
    assert findings[0].line == 2


def test_most_specific_code_wins_on_one_line() -> None:
    findings = check_source("m = __import__('problems.registry')\n")
    assert {f.code for f in findings} == {"rule.dynamic_code", "rule.reference_call"}
    assert first_reason(findings) == "rule.reference_call"


def test_plain_words_in_strings_and_docstrings_pass() -> None:
    source = (
        '"""Unlike triton or cupy, this uses the reference layout."""\n'
        "MSG = 'compare against the reference'\n\ndef solve(x):\n    return x\n"
    )
    assert check_source(source) == []


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("'a' + 'b'", "ab"),
        ("f'{\"x\"}y'", "xy"),
        ("''.join(['s', 'o'])", "so"),
        ("'edoc'[::-1]", "code"),
        ("'A'.lower() * 2", "aa"),
        ("x + 'a'", None),
    ],
)
def test_constant_string_folding(expr: str, value: str | None) -> None:
    import ast

    assert fold_str(ast.parse(expr, mode="eval").body) == value
