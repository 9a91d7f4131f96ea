"""The per-call GPU span: read from the profiler's records after the timed calls, reported by
the runners, summarised in the breakdown (informational, never scored)."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from engine.grading.judge.breakdown import CallBreakdown
from engine.grading.runner import dsl_hooks
from engine.grading.runner.cupti_activity import span_ns
from engine.grading.runner.dsl_hooks import (
    DEVICE_PROFILE_CALLS,
    MAX_SPAN_CALLS,
    DeviceEvent,
    ProfiledCalls,
    profiled_calls,
    span_us,
)
from engine.grading.runner.loop import Runner

CONTROL = DeviceEvent("void at::native::vectorized_elementwise_kernel<add>", 0.0, 1.0)


# -- the span of one call's records ---------------------------------------------------------
def test_span_ns_runs_from_the_first_start_to_the_last_end() -> None:
    assert span_ns([]) is None
    assert span_ns([("k", 100, 400)]) == 300
    # unordered, overlapping (two streams), a short one ending before a longer one
    records = [("b", 250, 900), ("a", 100, 300), ("copy", 120, 200)]
    assert span_ns(records) == 800


def test_span_us_includes_the_gaps_between_kernels() -> None:
    assert span_us([]) is None
    events = [DeviceEvent("a", 10.0, 5.0), DeviceEvent("b", 40.0, 10.0)]
    assert span_us(events) == pytest.approx(40.0)  # 10 → 50: 15 µs of kernels, 25 of gap


# -- the runner's profiled calls ------------------------------------------------------------
def _fake_profiler(
    monkeypatch: pytest.MonkeyPatch, regions: list[list[DeviceEvent] | None]
) -> list[int]:
    """``_device_events`` answering with ``regions`` in turn (each runs the call first)."""
    ran: list[int] = []
    queue = list(regions)

    def events(call: Any) -> list[DeviceEvent] | None:
        call()
        ran.append(1)
        return queue.pop(0) if queue else regions[-1]

    monkeypatch.setattr(dsl_hooks, "_device_events", events)
    return ran


def test_each_call_gives_its_span_without_the_control_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    one = [CONTROL, DeviceEvent("k1", 100.0, 20.0), DeviceEvent("k2", 130.0, 30.0)]
    two = [CONTROL, DeviceEvent("k1", 500.0, 40.0)]
    calls: list[int] = []
    _fake_profiler(monkeypatch, [one, two, one, two])
    found = profiled_calls(lambda: calls.append(1), 4)
    assert found is not None and len(calls) == 4
    assert found.spans_ms == pytest.approx([0.06, 0.04, 0.06, 0.04])  # 100 → 160 µs; 40 µs
    assert found.device_ms == pytest.approx(0.045)  # median of 50, 40, 50, 40 µs of kernels


def test_a_call_without_device_work_has_no_span(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_profiler(monkeypatch, [[CONTROL]])
    assert profiled_calls(lambda: None, 3) == ProfiledCalls(0.0, [])


@pytest.mark.parametrize(
    "regions",
    [[None], [[]], [[DeviceEvent("k1", 0.0, 5.0)]], [[CONTROL, DeviceEvent("k", 2.0, 1.0)], []]],
    ids=["no-profiler", "no-events", "control-missing", "control-missing-later"],
)
def test_no_profiler_or_a_missed_control_gives_nothing(
    monkeypatch: pytest.MonkeyPatch, regions: list[Any]
) -> None:
    _fake_profiler(monkeypatch, regions)
    assert profiled_calls(lambda: None, 3) is None


def test_profiled_calls_stop_at_the_budget_after_the_first_few(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran = _fake_profiler(monkeypatch, [[CONTROL, DeviceEvent("k", 5.0, 1.0)]])
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0  # every look at the clock is a second later
        return now[0]

    found = profiled_calls(lambda: None, 50, budget_s=0.5, clock=clock)
    assert found is not None and len(ran) == DEVICE_PROFILE_CALLS == len(found.spans_ms)
    ran.clear()
    assert profiled_calls(lambda: None, 50) is not None and len(ran) == 50  # a fast call


def test_no_spans_without_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the GPU run covers the profiler")
    assert profiled_calls(lambda: None, 5) is None


# -- the runner's "profile" reply -----------------------------------------------------------
def _runner(cuda: bool) -> Runner:
    """The runner's own code without its process (its constructor would set this process's
    torch threads): what ``profile`` reads is set here."""
    runner = Runner.__new__(Runner)
    runner.cuda, runner.last_inputs, runner.solve = cuda, [], lambda: None
    return runner


def test_the_cpu_runner_answers_profile_with_no_time_and_no_spans() -> None:
    runner = _runner(cuda=False)
    reply, fds = runner.dispatch({"op": "profile", "span_calls": 50}, [])
    assert fds == [] and set(reply) == {"op", "device_ms", "spans_ms", "threads"}
    assert reply["op"] == "profiled" and reply["device_ms"] is None and reply["spans_ms"] is None
    assert isinstance(reply["threads"], int) and reply["threads"] > 0


@pytest.mark.parametrize(
    ("asked", "runs"),
    [(50, 50), (10_000, MAX_SPAN_CALLS), (0, 1), (-3, 1), ("50", 3), (True, 3), (None, 3)],
)
def test_the_runner_caps_the_profiled_calls_it_is_asked_for(
    monkeypatch: pytest.MonkeyPatch, asked: Any, runs: int
) -> None:
    seen: list[int] = []
    found = ProfiledCalls(0.2, [0.25, 0.3])

    def profiled(call: Any, n: int) -> ProfiledCalls:
        seen.append(n)
        return found

    monkeypatch.setattr(dsl_hooks, "profiled_calls", profiled)
    message = {"op": "profile"} if asked is None else {"op": "profile", "span_calls": asked}
    reply, _ = _runner(cuda=True).dispatch(message, [])
    assert seen == [runs]
    assert (reply["device_ms"], reply["spans_ms"]) == (0.2, [0.25, 0.3])


@pytest.mark.slow
def test_a_real_cpu_runner_process_answers_profile_without_spans() -> None:
    """The jailed runner process itself (not an in-process object) on the CPU preview."""
    from engine.grading.judge.runner_proc import RunnerOptions, RunnerProcess

    runner = RunnerProcess.spawn(RunnerOptions(device="cpu", preload_dsls=False))
    try:
        runner.wait_ready()
        reply, _ = runner.request({"op": "profile", "span_calls": 8}, time.monotonic() + 60)
    finally:
        runner.close()
    assert reply["op"] == "profiled" and reply["device_ms"] is None and reply["spans_ms"] is None


# -- the judge's summary --------------------------------------------------------------------
class _Reply:
    """A runner link answering ``profile`` with a fixed reply, keeping what it was asked."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.asked: list[dict[str, Any]] = []

    def request(self, message: dict[str, Any], deadline: float) -> tuple[Any, list]:
        self.asked.append(message)
        return self.reply, []


def _settled(reply: Any, timed: int = 4) -> tuple[dict[str, Any], _Reply]:
    result: dict[str, Any] = {}
    split, link = CallBreakdown(result), _Reply(reply)
    for _ in range(timed):
        split.add("submission", {"host_ms": 0.1, "ms": 1.0})
    split.settle("submission", link, 0.0, cuda=True)
    return result["breakdown"]["submission"], link


def test_the_breakdown_keeps_the_median_and_spread_of_sane_spans() -> None:
    side, link = _settled({"op": "profiled", "device_ms": 0.5, "spans_ms": [0.4, 0.6, 0.5, 0.7]})
    assert link.asked == [{"op": "profile", "span_calls": 4}]  # one per timed call
    assert (side["span_ms"], side["span_calls"], side["ignored"]) == (0.55, 4, 0)
    assert side["span_iqr_ms"] == pytest.approx(0.15)
    assert side["e2e_ms"] == 1.0 and side["device_ms"] == 0.5  # beside, not instead


def test_junk_spans_are_ignored_and_counted() -> None:
    junk = [math.nan, -0.2, 0.0, math.inf, "0.3", True, None, [0.3], 1e300]
    side, _ = _settled({"op": "profiled", "device_ms": None, "spans_ms": [0.3, *junk, 0.5]})
    assert (side["span_ms"], side["span_calls"], side["ignored"]) == (0.4, 2, len(junk))


@pytest.mark.parametrize(
    ("spans", "ignored"), [(None, 0), ("0.3", 1), ({"ms": 0.3}, 1), (0.3, 1), ([], 0)]
)
def test_spans_that_are_not_a_list_give_no_span(spans: Any, ignored: int) -> None:
    side, _ = _settled({"op": "profiled", "device_ms": 0.5, "spans_ms": spans})
    assert (side["span_ms"], side["span_iqr_ms"], side["span_calls"]) == (None, None, 0)
    assert side["ignored"] == ignored


def test_the_spans_asked_for_and_kept_are_capped() -> None:
    side, link = _settled(
        {"op": "profiled", "device_ms": 0.5, "spans_ms": [0.25] * (MAX_SPAN_CALLS + 6)},
        timed=MAX_SPAN_CALLS + 30,
    )
    assert link.asked[0]["span_calls"] == MAX_SPAN_CALLS
    assert (side["span_calls"], side["ignored"]) == (MAX_SPAN_CALLS, 6)


def test_a_profile_answered_with_junk_gives_no_span() -> None:
    side, _ = _settled({"op": "error", "spans_ms": [0.3]})
    assert side["span_ms"] is None and side["span_calls"] == 0 and side["ignored"] == 1
