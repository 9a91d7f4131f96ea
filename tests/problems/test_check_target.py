"""``mkb problems check --gpu``: memory need (traced from shapes, or the measured peak) and SOL
per problem on one grading GPU, without a GPU; a problem that does not fit is flagged."""

from __future__ import annotations

import json

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from app.cli import main as mkb
from problems.memory import CONTEXT_BYTES, _Tracer, judge_peak, memory_need
from problems.registry import get
from problems.sol import sol_estimate
from problems.targets import TARGETS


@pytest.mark.slow
def test_the_tracer_counts_storages_once_and_frees_them() -> None:
    with FakeTensorMode(), _Tracer() as counter:
        a = torch.empty(1000, dtype=torch.float64)  # 8,000 bytes
        view = a[10:]  # the same storage
        b = a * 2
        del a, b
        live_with_view = counter.live
        del view
    assert counter.peak == 16_000
    assert live_with_view == 8_000 and counter.live == 0


def test_a_traced_plan_counts_inputs_anchor_and_outputs() -> None:
    problem = get("p28")  # add + RMSNorm: hidden [14509, 4096] bf16, residual, weight [4096]
    plan = memory_need(problem, "full")
    assert plan.method == "stored" and plan.sizes is not None  # the committed trace
    rows, hidden = problem.workload["rows"], problem.workload["hidden"]
    inputs = 2 * rows * hidden * 2 + hidden * 2
    sizes = plan.sizes
    assert sizes.inputs == inputs and sum(sizes.promoted) == 4 * inputs  # float64 copies
    assert sizes.anchor_peak >= sizes.anchor_outputs >= 4 * sizes.outputs > 0
    runner = inputs + sizes.reference_peak
    assert plan.runner_bytes == runner
    judge = judge_peak(sizes, "cuda")
    assert plan.judge_bytes == judge
    assert plan.total_bytes == pytest.approx(judge + runner + 2 * CONTEXT_BYTES)


def test_an_untraceable_problem_falls_back_to_the_measured_peak(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import problems.memory as memory
    import problems.memory_store as store

    def untraceable(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Tensor.item() cannot be called on meta tensors")

    monkeypatch.setattr(store, "stored_entry", lambda *args: None)  # as if stale
    monkeypatch.setattr(memory, "draw_sizes", untraceable)
    need = memory_need(get("p52"), "full")
    assert need.method == "measured" and "measured on the NVIDIA H200" in need.note
    assert "RuntimeError" in need.note
    assert need.total_bytes is not None and need.total_bytes > CONTEXT_BYTES


def test_cli_flags_what_does_not_fit_and_computes_sol_on_that_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["problems", "check", "p28", "p34", "--scale", "full", "--json", "--gpu"]
    assert mkb([*args, "h100"]) == 0  # p34's float64 anchor alone is ~76 GB: on the host
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["p34"]["fits"] is True and rows["p34"]["need_gb"] < 80
    assert "anchor on the host" in rows["p34"]["note"]
    assert rows["p28"]["fits"] is True and "anchor" not in rows["p28"]["note"]
    assert mkb([*args, "b200"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["p34"]["fits"] is True
    for pid, row in rows.items():
        sol = sol_estimate(get(pid).cost("full"), TARGETS["b200"].hardware)
        assert row["sol_us"] == pytest.approx(sol.seconds * 1e6) and row["bound"] == sol.bound
    assert mkb(["problems", "check", "p28", "--scale", "full", "--gpu", "b200"]) == 0
    out = capsys.readouterr().out
    assert "1 problems on the NVIDIA B200 (Blackwell, sm_100a), 180 GB (full scale): 1 fit" in out
