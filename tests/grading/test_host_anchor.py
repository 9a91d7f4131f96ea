"""The float64 anchor on the host where a grading does not fit the card with it on the device:
the plan's placement (problems/memory_model.py), the judge's anchor check on the host (same
figures and verdicts as on the device: on this CPU-only machine both are the CPU, so the test
holds the host path's wiring, not a second device), the judge's own time moving the
submission's limit on, and the supervisor's deadline following within its allowance."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.grading.admission import INFRA_JUDGE_CRASH, INFRA_OOM
from engine.grading.api import GradeRequest
from engine.grading.backends.card_memory import (
    LEDGER_DIR_ENV,
    MemoryUnfit,
    host_anchor_allowance,
    host_ledger,
    host_memory,
)
from engine.grading.backends.local import LocalBackend
from engine.grading.judge.anchor import check_anchor, stand_ins
from engine.grading.judge.output_checks import Draw, OutputChecks
from engine.grading.judge.state import Evaluation
from engine.grading.parent.evaluate import feedback_from
from engine.grading.parent.supervise import HOST_ANCHOR, ChildOutcome, Limits, _ChildWatch
from problems.memory_model import (
    CONTEXT_BYTES,
    HEADROOM_BYTES,
    DrawSizes,
    anchor_run,
    host_anchor_bytes,
    placed_plan,
)
from problems.registry import get

GB = 1e9


def _sizes() -> DrawSizes:
    """A p34-like draw: 8 GB of bf16 inputs whose float64 anchor needs far more."""
    return DrawSizes(
        inputs=8 * GB,
        inplace_inputs=0.0,
        promoted=[32 * GB],
        input_leaves=[8 * GB],
        outputs=5 * GB,
        anchor_outputs=20 * GB,
        reference_peak=19 * GB,
        anchor_peak=43 * GB,
        largest_output=10**9,
    )


def test_the_anchor_goes_to_the_host_only_when_the_card_cannot_hold_it() -> None:
    sizes = _sizes()
    roomy = placed_plan(sizes, 200 * GB, flops=8.6e13)  # the draw waits on the card too
    assert (roomy.anchor, roomy.draw) == ("device", "device") and roomy.host_bytes is None
    # the anchor run beside the held draw (inputs 8, outputs 5) and the reference's outputs 5
    assert roomy.judge_bytes == anchor_run(sizes) + 8 * GB + 5 * GB + 5 * GB == 93 * GB
    big = placed_plan(sizes, 110 * GB, flops=8.6e13)  # not with the draw: it waits on the host
    assert (big.anchor, big.draw) == ("device", "host") and big.host_bytes is None
    assert big.judge_bytes == anchor_run(sizes) == 75 * GB
    assert roomy.total_bytes - big.total_bytes == 18 * GB  # type: ignore[operator]
    small = placed_plan(sizes, 80 * GB, flops=8.6e13)
    assert (small.anchor, small.draw) == ("host", "host") and small.fits(80 * GB)
    assert small.judge_bytes == 27 * GB  # the reference run: inputs and its peak
    assert small.total_bytes == 27 * GB + 27 * GB + 2 * CONTEXT_BYTES
    assert small.host_bytes == host_anchor_bytes(sizes) == 8 * GB + 10 * GB + 75 * GB
    assert small.anchor_s == pytest.approx(8.6e13 / (51e9 * 16))
    assert placed_plan(sizes, None).anchor == "device"  # no card size: nothing moves
    tiny = placed_plan(sizes, 40 * GB)  # fits neither way: the smaller plan, unfit
    assert tiny.anchor == "host" and not tiny.fits(40 * GB, HEADROOM_BYTES)


def test_the_allowance_covers_every_anchor_check_of_the_job() -> None:
    host = placed_plan(_sizes(), 80 * GB, flops=8.6e13)
    job = {"seeds": {"correctness": [1, 2, 3, 4, 5]}, "recheck": [0, 4, 9]}
    assert host_anchor_allowance(host, job) == 9 * 4 * host.anchor_s  # type: ignore[operator]
    assert host_anchor_allowance(placed_plan(_sizes(), 200 * GB), job) == 0.0


@pytest.mark.parametrize("candidate", ["reference", "dropped_term"])
def test_the_host_anchor_gives_the_device_anchors_figures(candidate: str) -> None:
    problem = get("p28")
    inputs = problem.make_inputs(2, "cpu", "smoke")
    u = getattr(problem, candidate)(*inputs)
    device = check_anchor(problem.reference, u, stand_ins(u), inputs, "cpu")
    threads = torch.get_num_threads()
    host = check_anchor(problem.reference, u, stand_ins(u), inputs, "cpu", anchor_device="cpu")
    assert torch.get_num_threads() == threads  # the host anchor's threads given back
    assert device[:2] == host[:2] and device[0] is (candidate == "reference")
    assert [c.as_dict() for c in device[2]] == [c.as_dict() for c in host[2]]


@pytest.mark.parametrize("candidate", ["reference", "dropped_term"])
def test_a_draw_kept_on_the_card_is_checked_alike_without_going_to_the_host(
    candidate: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan that keeps checked draws on the device (``job["draw"]``): the judge moves
    neither the draw nor the references' outputs to the host, and the figures and verdict are
    the host path's (on this CPU machine host and device are one, so the test holds the
    wiring: where ``to_host`` is called)."""
    import engine.grading.judge.anchor as anchor_module
    import engine.grading.judge.output_checks as checks_module

    problem = get("p28")
    moved: list[str] = []

    def spy(where: str, real: Any) -> Any:
        def to_host(value: Any) -> Any:
            moved.append(where)
            return real(value)

        return to_host

    monkeypatch.setattr(checks_module, "to_host", spy("draw", checks_module.to_host))
    monkeypatch.setattr(anchor_module, "to_host", spy("reference", anchor_module.to_host))
    figures = {}
    for draw in ("host", "device"):
        moved.clear()
        job: dict[str, Any] = {"device": "cpu", "draw": draw}
        evaluation = Evaluation(job, problem, _Sent(), cuda=False, scale="smoke")
        evaluation.deadline = time.monotonic() + 100.0
        checks = OutputChecks(evaluation, fetch=lambda: ())
        inputs = problem.make_inputs(5, "cpu", "smoke")
        ok = checks.check_anchor(Draw(getattr(problem, candidate)(*inputs), inputs), "c", 0)
        assert ok is (candidate == "reference")
        figures[draw] = (evaluation.draws[-1]["outputs"], list(moved))
    assert figures["device"][0] == figures["host"][0]
    assert {"draw", "reference"} <= set(figures["host"][1])  # the host path moved both
    assert figures["device"][1] == []


def test_a_draw_that_does_not_fit_the_card_goes_to_the_host_for_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plan fell short: the check with the draw on the card runs out of device memory.
    The draw goes to the host and is checked there (the same verdict), every later draw of
    the grading waits on the host, and the result counts the fallback; any other error
    is raised as before."""
    import engine.grading.judge.output_checks as checks_module

    real = checks_module.anchor.check_anchor
    calls: list[bool] = []

    def short_card(*args: Any, resident: bool = False, **kw: Any) -> Any:
        calls.append(resident)
        if resident:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 15.8 GiB")
        return real(*args, **kw)

    monkeypatch.setattr(checks_module.anchor, "check_anchor", short_card)
    problem = get("p28")
    job: dict[str, Any] = {"device": "cpu", "draw": "device"}
    evaluation = Evaluation(job, problem, _Sent(), cuda=False, scale="smoke")
    evaluation.deadline = time.monotonic() + 100.0
    checks = OutputChecks(evaluation, fetch=lambda: ())
    for i in range(2):
        inputs = problem.make_inputs(7 + i, "cpu", "smoke")
        assert checks.check_anchor(Draw(problem.reference(*inputs), inputs), "correctness", i)
    assert calls == [True, False, False] and job["draw"] == "host"
    assert evaluation.result["draw_fallbacks"] == 1

    def broken(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("a reference bug, not the card")

    monkeypatch.setattr(checks_module.anchor, "check_anchor", broken)
    job["draw"] = "device"
    inputs = problem.make_inputs(9, "cpu", "smoke")
    with pytest.raises(RuntimeError, match="reference bug"):
        checks.check_anchor(Draw(problem.reference(*inputs), inputs), "correctness", 2)


class _Sent:
    def __init__(self) -> None:
        self.messages: list[tuple[str, Any]] = []

    def send(self, kind: str, data: Any) -> None:
        self.messages.append((kind, data))


@pytest.mark.parametrize("anchor", [None, "host"])
def test_the_judge_takes_a_host_anchors_time_off_the_submissions_limit(
    anchor: str | None,
) -> None:
    problem = get("p28")
    job: dict[str, Any] = {"device": "cpu", "anchor": anchor}
    sent = _Sent()
    evaluation = Evaluation(job, problem, sent, cuda=False, scale="smoke")
    evaluation.deadline = deadline = time.monotonic() + 100.0
    checks = OutputChecks(evaluation, fetch=lambda: ())
    inputs = problem.make_inputs(3, "cpu", "smoke")
    assert checks.check_anchor(Draw(problem.reference(*inputs), inputs), "correctness", 0)
    if anchor is None:
        assert sent.messages == [] and evaluation.deadline == deadline
    else:
        (phase, start), (kind, spent) = sent.messages
        assert (phase, start, kind) == ("phase", HOST_ANCHOR, "judge_time") and spent > 0
        assert evaluation.deadline == pytest.approx(deadline + spent, abs=1e-3)


def _line(kind: str, data: Any, nonce: str = "n") -> bytes:
    return json.dumps({"nonce": nonce, "kind": kind, "data": data}).encode()


def test_the_supervisor_stops_the_submissions_clock_while_the_host_anchor_runs() -> None:
    watch = _ChildWatch(1, -1, "n", Limits(judge_extra_s=10.0), poll_exit=lambda: None)
    watch.handle(_line("phase", "import"))
    left = watch.deadline - time.monotonic()  # the submission's 600 s
    watch.handle(_line("phase", HOST_ANCHOR, nonce="forged"))  # not the judge's: ignored
    assert watch.paused is None
    watch.handle(_line("phase", "correctness"))
    watch.handle(_line("phase", HOST_ANCHOR))
    assert watch.deadline - time.monotonic() == pytest.approx(10.0, abs=0.5)  # the allowance
    time.sleep(0.2)
    watch.handle(_line("judge_time", 0.2))
    assert watch.deadline - time.monotonic() == pytest.approx(left, abs=0.1)  # none spent
    assert watch.outcome.last_phase == "correctness"  # a later kill is the submission's
    assert 0.2 <= watch.extended < 1.0
    watch.handle(_line("phase", HOST_ANCHOR))
    assert watch.deadline - time.monotonic() == pytest.approx(10.0 - watch.extended, abs=0.5)
    watch.handle(_line("judge_time", 0.0))
    watch.handle(_line("judge_time", 5.0))  # no anchor running: nothing moves
    assert watch.deadline - time.monotonic() == pytest.approx(left, abs=0.1)


def test_a_grading_killed_in_its_host_anchor_is_the_graders_error() -> None:
    over = feedback_from(
        GradeRequest("p34", "cute", ""),
        ChildOutcome(phases=["import", "correctness", HOST_ANCHOR], timed_out=True),
        "cuda",
    )
    assert (over.verdict, over.reason) == ("error", INFRA_JUDGE_CRASH)
    timeout = feedback_from(
        GradeRequest("p34", "cute", ""),
        ChildOutcome(phases=["import", "correctness", HOST_ANCHOR, "correctness"], timed_out=True),
        "cuda",
    )
    assert (timeout.verdict, timeout.reason) == ("fail", "timeout")
    memory = feedback_from(
        GradeRequest("p34", "cute", ""),
        ChildOutcome(phases=["import", "correctness", HOST_ANCHOR], memory_killed=True),
        "cuda",
    )
    assert (memory.verdict, memory.reason) == ("error", INFRA_OOM)


async def test_a_host_anchor_reserves_host_memory_and_is_refused_beyond_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(LEDGER_DIR_ENV, str(tmp_path))
    ledger = host_ledger()
    assert ledger is not None and ledger.capacity > 1 * GB
    host = placed_plan(_sizes(), 80 * GB, flops=1e12)
    small = replace(host, host_bytes=1 * GB)
    async with host_memory(small):
        assert ledger.reserved() == 1 * GB
    async with host_memory(placed_plan(_sizes(), 200 * GB)):  # anchor on the device
        assert ledger.reserved() == 0
    assert ledger.reserved() == 0
    with pytest.raises(MemoryUnfit, match="host memory"):
        async with host_memory(replace(host, host_bytes=ledger.capacity)):
            pass


async def test_the_backend_sends_a_host_anchor_job_with_its_allowance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = LocalBackend(gpus=None, preview_slots=1, preload_dsls=False, warm=False)
    slot = backend.slots[0]
    sent: list[tuple[dict[str, Any], Limits]] = []

    async def run(job: dict[str, Any], limits: Limits, workdir: str) -> ChildOutcome:
        sent.append((job, limits))
        return ChildOutcome(result={"verdict": "pass"})

    monkeypatch.setattr(slot, "run", run)
    request = GradeRequest("p34", "cute", "")
    host = placed_plan(_sizes(), 80 * GB, flops=8.6e13)
    await backend._run_on(slot, request, "cuda", host)
    await backend._run_on(slot, request, "cuda", placed_plan(_sizes(), 200 * GB))
    await backend._run_on(slot, request, "cpu", host)  # a preview: its host is its device
    (job, limits), (device_job, device_limits), (cpu_job, _) = sent
    assert job["anchor"] == "host" and limits.judge_extra_s == host_anchor_allowance(host, job)
    assert limits.judge_extra_s > 0 and limits.timeout_s == device_limits.timeout_s
    assert "anchor" not in device_job and device_limits.judge_extra_s == 0
    assert device_job["draw"] == "device" and "draw" not in job  # the roomy card keeps draws
    assert device_limits.memory_limit_mb is not None and limits.memory_limit_mb is not None
    grown = limits.memory_limit_mb - device_limits.memory_limit_mb  # the judge's watchdog
    assert grown * 2**20 >= host.host_bytes > (grown - 1) * 2**20  # type: ignore[operator]
    assert job["rss_limit_mb"] == device_job["rss_limit_mb"]  # the runner's is unchanged
    assert "anchor" not in cpu_job and "draw" not in cpu_job
