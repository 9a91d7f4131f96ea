"""The judge's anchor check with only a chunk on the device gives the figures of the whole
comparison (problems.compare), case by case: passes, tolerance failures, NaN, infinities,
exact dtypes, strided outputs, a structure mismatch, and an eager reference that overflows."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from engine.grading.judge.anchor import check_anchor, check_leaf, equal_bytes, stand_ins
from problems.compare import check_leaf as whole_leaf
from problems.compare import check_outputs, reference_and_anchor
from problems.registry import get


def _same(a: Any, b: Any) -> bool:
    da, db = a.as_dict(), b.as_dict()
    for key in da:
        x, y = da[key], db[key]
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        if x != y:
            return False
    return True


def _cases() -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    z = torch.randn(200, 37, generator=g, dtype=torch.float64)
    v = z.to(torch.bfloat16)
    close = (z + 1e-3 * torch.randn(z.shape, generator=g, dtype=torch.float64)).bfloat16()
    far = close.clone()
    far[117, 3] += 4.0
    nan = close.clone()
    nan[199, 36] = float("nan")
    z_inf = z.clone()
    z_inf[10, 1] = float("inf")
    v_inf = z_inf.bfloat16()
    u_inf_wrong = v_inf.clone()
    u_inf_wrong[10, 1] = 0.0
    u_inf_extra = v_inf.clone()
    u_inf_extra[150, 2] = float("-inf")
    ints = torch.randint(0, 9, (3001,), generator=g)
    ints_wrong = ints.clone()
    ints_wrong[[5, 3000]] += 1
    fp8 = torch.randn(4096, generator=g).to(torch.float8_e4m3fn)
    strided = close.t().contiguous().t()  # same values, column-major
    return [
        ("pass", close, v, z),
        ("tolerance", far, v, z),
        ("nan", nan, v, z),
        ("inf_right", v_inf, v_inf, z_inf),
        ("inf_wrong", u_inf_wrong, v_inf, z_inf),
        ("inf_extra", u_inf_extra, v_inf, z_inf),
        ("ints", ints, ints, ints),
        ("ints_wrong", ints_wrong, ints, ints),
        ("fp8", fp8, fp8, fp8.double()),
        ("strided", strided, v, z),
        ("zero_dim", close[3, 3], v[3, 3], z[3, 3]),
        ("all_inf", v_inf[10:11, 1:2], v_inf[10:11, 1:2], z_inf[10:11, 1:2]),
    ]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
@pytest.mark.parametrize("chunk", [97, 1 << 22])
def test_a_chunked_leaf_check_has_the_whole_checks_figures(case: tuple, chunk: int) -> None:
    _, u, v, z = case
    whole = whole_leaf(0, u, v, z)
    chunked = check_leaf(0, u, v, z, "cpu", chunk=chunk)
    assert _same(chunked, whole), (chunked, whole)


def test_an_overflowing_eager_reference_raises_in_any_chunk() -> None:
    z = torch.full((100,), 1e6, dtype=torch.float64)
    v = z.half()  # 1e6 overflows float16
    with pytest.raises(ValueError, match="overflowed"):
        whole_leaf(0, v, v, z)
    with pytest.raises(ValueError, match="overflowed"):
        check_leaf(0, v, v, z, "cpu", chunk=9)


def test_equal_bytes_compares_every_chunk() -> None:
    a = torch.arange(1000, dtype=torch.int64).view(torch.uint8)
    b = a.clone()
    assert equal_bytes(a, b, chunk=64)
    b[-1] ^= 1  # the last chunk only
    assert not equal_bytes(a, b, chunk=64)
    assert not equal_bytes(a, a[:-8], chunk=64)


@pytest.mark.parametrize("pid", ["p28", "p51"])
def test_the_anchor_check_of_a_problem_matches_the_whole_comparison(pid: str) -> None:
    problem = get(pid)
    inputs = problem.make_inputs(1, "cpu", "smoke")
    v, z = reference_and_anchor(problem.reference, inputs)
    u = v.clone() if isinstance(v, torch.Tensor) else [t.clone() for t in v]
    bad = u if isinstance(u, torch.Tensor) else u[0]
    bad.view(-1)[0] += 1.0
    before = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
    ok, structure, checks = check_anchor(problem.reference, u, stand_ins(u), inputs, "cpu")
    whole = check_outputs(u, v, z)
    assert (ok, structure) == whole[:2] and not ok
    assert all(_same(a, b) for a, b in zip(checks, whole[2]))
    for a, b in zip(inputs, before):  # the references ran on copies
        assert not isinstance(a, torch.Tensor) or torch.equal(a, b)
    wrong = torch.zeros((), dtype=torch.float32).expand(3, 3)
    ok, structure, _ = check_anchor(problem.reference, u, wrong, inputs, "cpu")
    assert not ok and structure == check_outputs(wrong, v, z)[1]
