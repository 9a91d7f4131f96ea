"""Fixtures for the problem tests: a small valid problem module and a writer for variants."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

# A valid problem (fused add + RMSNorm at toy size). Tests derive broken variants from it by
# replacing exact snippets, so each snippet below must stay unique in the text.
TOY_SOURCE = '''"""Toy fused residual add and RMSNorm for the validator tests.
Add the residual to bfloat16 rows, normalise each row by its root mean square (epsilon 1e-5)
and scale by a weight."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost

ID = "p28"
SLUG = "toy_add_rmsnorm"
FAMILY = "MLP & Norm"
ORIGIN = "flashinfer"
SOURCE = "tests/problems/conftest.py"
LICENSE = "Apache-2.0"
WORKLOAD = {"rows": 16, "hidden": 256}
SMOKE = {"rows": 16, "hidden": 256}
INPUTS = ("x", "residual", "weight")
OUTPUTS = ("out",)
INPLACE = {}
DECISION_MARGIN = None


def make_inputs(seed, device, w):
    g = generator(seed, device)
    x = randn(g, (w.rows, w.hidden), torch.bfloat16, device)
    r = randn(g, (w.rows, w.hidden), torch.bfloat16, device)
    weight = randn(g, (w.hidden,), torch.bfloat16, device, std=0.1, mean=1.0)
    return [x, r, weight]


def reference(x, residual, weight):
    dt = compute_dtype(x, residual, weight)
    s = x.to(dt) + residual.to(dt)
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * weight.to(dt)
    return y.to(x.dtype)


def dropped_term(x, residual, weight):
    dt = compute_dtype(x, weight)
    s = x.to(dt)
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * weight.to(dt)
    return y.to(x.dtype)


def cost(w):
    return Cost(flops={"fp32": 6.0 * w.rows * w.hidden}, bytes=6.0 * w.rows * w.hidden)
'''

WriteProblem = Callable[..., Path]


@pytest.fixture
def write_problem(tmp_path: Path) -> WriteProblem:
    """Write a variant of the toy problem: ``write_problem({old: new}, folder=..., name=...)``."""
    counter = iter(range(1000))

    def write(
        replacements: dict[str, str] | None = None,
        folder: str = "mlp_norm",
        name: str = "p28_toy_add_rmsnorm.py",
        root: Path | None = None,
    ) -> Path:
        text = TOY_SOURCE
        for old, new in (replacements or {}).items():
            assert text.count(old) == 1, f"snippet not unique in the toy problem: {old!r}"
            text = text.replace(old, new)
        base = root if root is not None else tmp_path / f"case{next(counter)}"
        path = base / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return write
