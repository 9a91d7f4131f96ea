"""The memory planner against the measured peak of a CPU run, and ``mkb problems memory``.

The plan is traced from shapes (no data for large tensors); the measurement runs the judge's
own anchor check (engine/grading/judge/anchor.py) and one reference run (the runner's plan)
for real on the CPU at full scale, where the host is the device, and reads the process's
peak resident memory (VmHWM, reset through /proc/self/clear_refs) with glibc returning every
allocation over 64 KiB to the system when freed, so the peak is the live bytes' peak."""

from __future__ import annotations

import ctypes
import gc
import json
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from app.cli import main as mkb
from engine.grading.judge.anchor import check_anchor, stand_ins
from problems.compare import clone_inputs, reference_numerics
from problems.memory import draw_sizes, judge_peak, runner_peak
from problems.registry import get

M_MMAP_THRESHOLD = -3


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        text = f.read()
    return int(re.search(rf"{key}:\s+(\d+)", text).group(1)) * 1024  # type: ignore[union-attr]


def _peak(fn: Callable[[], Any]) -> tuple[int, Any]:
    """(peak resident bytes above the resident bytes before ``fn``, its result)."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark back to the current resident size
    base = _status("VmRSS")
    out = fn()
    return _status("VmHWM") - base, out


@pytest.fixture
def freed_allocations_return() -> Iterator[None]:
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self")
    libc = ctypes.CDLL("libc.so.6")
    assert libc.mallopt(M_MMAP_THRESHOLD, 1 << 16) == 1
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024)  # glibc's default


@pytest.mark.slow
@pytest.mark.parametrize("pid", ["p39", "p31", "p25"])
def test_the_plan_bounds_the_measured_peak_of_a_cpu_run(
    pid: str, freed_allocations_return: None
) -> None:
    problem = get(pid)
    sizes = draw_sizes(problem, "full")
    inputs = problem.make_inputs(0, "cpu", "full")
    with reference_numerics():
        runner, u = _peak(lambda: problem.reference(*clone_inputs(inputs)))
    judge, (ok, _, _) = _peak(
        lambda: check_anchor(problem.reference, u, stand_ins(u), inputs, "cpu")
    )
    assert ok
    planned_runner = runner_peak(sizes)  # a copy of the inputs and one reference run
    assert runner == pytest.approx(planned_runner, rel=0.05, abs=8e6)
    planned_judge = judge_peak(sizes, "cpu") - sizes.inputs - sizes.outputs  # beyond the draw
    assert 0.7 * planned_judge <= judge <= 1.05 * planned_judge + 8e6
    assert judge > 100e6  # large enough for the resident size to measure it


def test_cli_lists_the_plans_and_flags_what_does_not_fit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["problems", "memory", "p28", "p34", "--json", "--gpu-memory"]
    assert mkb([*args, "50"]) == 1
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["p34"]["fits"] is False and rows["p34"]["total_gb"] > 50
    assert rows["p28"]["fits"] is True and rows["p28"]["method"] == "stored"
    p28 = rows["p28"]
    assert p28["judge_gb"] + p28["runner_gb"] < p28["total_gb"] < 50
    assert mkb([*args, "80"]) == 0  # p34 fits with its float64 anchor on the host
    p34 = {r["id"]: r for r in json.loads(capsys.readouterr().out)}["p34"]
    assert p34["anchor"] == "host" and p34["fits"] and p34["total_gb"] + 2 <= 80
    assert p34["host_gb"] > 80 and p34["anchor_s"] > 10
    assert mkb([*args, "180"]) == 0
    p34 = {r["id"]: r for r in json.loads(capsys.readouterr().out)}["p34"]
    assert p34["anchor"] == "device" and p34["total_gb"] > 100 and p34["host_gb"] is None
    assert p34["draw"] == "device"  # and its checked draws (124.6 GB planned)
    assert mkb([*args, "120"]) == 0  # the anchor fits 120 GB, not with a draw beside it
    p34 = {r["id"]: r for r in json.loads(capsys.readouterr().out)}["p34"]
    assert (p34["anchor"], p34["draw"]) == ("device", "host") and p34["total_gb"] > 100
    assert rows["p28"]["draw"] == "device"  # small: its checked draws stay on the card
    assert mkb(["problems", "memory", "p38", "p51", "--gpu-memory", "80"]) == 0
    out = capsys.readouterr().out  # p51's draw stays on the card; p38's cannot
    assert "checked draws wait on the host for p38" in out and "p51" not in out.split(";")[-1]
    assert mkb(["problems", "memory", "p28", "--gpu-memory", "80"]) == 0
    out = capsys.readouterr().out
    assert "1 problems (full scale) on a 80 GB card, 2 GB kept free: 1 fit, 0 do not" in out
    assert mkb(["problems", "memory", "p28", "--gpu-memory", "0"]) == 2
