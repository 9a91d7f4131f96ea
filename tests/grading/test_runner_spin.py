"""Busy polling before a wait sleeps (GPU runners and judges), and the runner's optional
warm-up spin after staging a call's inputs."""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from engine.grading.api import GradeRequest
from engine.grading.judge.state import Evaluation
from engine.grading.options import EvalConfig
from engine.grading.parent.evaluate import make_job
from engine.grading.runner.channel import spin_until_readable
from engine.grading.runner.loop import MAX_WARM_S, Runner

# serial: the spin tests bound wall time to tens of milliseconds; a busy core beside them
# (another xdist worker) can stretch that, so they run alone
pytestmark = pytest.mark.serial


def test_spin_returns_false_after_its_budget_when_nothing_comes() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        start = time.perf_counter()
        assert spin_until_readable(a, 0.02) is False
        assert 0.02 <= time.perf_counter() - start < 1.0


def test_spin_sees_a_message_sent_while_it_polls() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        sender = threading.Timer(0.005, lambda: b.send(b"call"))
        sender.start()
        start = time.perf_counter()
        assert spin_until_readable(a, 5.0) is True
        assert time.perf_counter() - start < 2.0  # long before the budget ran out
        assert a.recv(16) == b"call"
        sender.join()


def test_spin_with_no_budget_only_looks() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        assert spin_until_readable(a, 0.0) is False
        b.send(b"x")
        assert spin_until_readable(a, 0.0) is True


def _bare_runner() -> Any:
    runner = Runner.__new__(Runner)
    runner._clock = time.perf_counter
    runner.last, runner.pending = None, []
    return runner


@pytest.mark.parametrize(
    ("warm_s", "at_least", "below"),
    [(None, 0.0, 0.02), (0.03, 0.03, 1.0), ("0.5", 0.0, 0.02), (-1, 0.0, 0.02), (10.0, 0.05, 1.0)],
)
def test_stage_spins_as_long_as_asked_and_never_past_the_cap(
    warm_s: Any, at_least: float, below: float
) -> None:
    """A "stage" request may ask the runner to stay busy before it answers (junk: no spin;
    at most MAX_WARM_S)."""
    message: dict[str, Any] = {"op": "stage", "inputs": []}
    if warm_s is not None:
        message["warm_s"] = warm_s
    start = time.perf_counter()
    assert _bare_runner().stage(message, []) == {"op": "staged"}
    took = time.perf_counter() - start
    assert at_least <= took < below, took
    assert MAX_WARM_S == 0.05


def test_the_judge_asks_for_the_configured_warm_up() -> None:
    off = Evaluation.stage_message(SimpleNamespace(job={}), ["layout"])  # type: ignore[arg-type]
    assert off == {"op": "stage", "inputs": ["layout"]}
    on = Evaluation.stage_message(SimpleNamespace(job={"stage_warmup_ms": 5.0}), [])  # type: ignore[arg-type]
    assert on == {"op": "stage", "inputs": [], "warm_s": 0.005}
    job = make_job(GradeRequest("p28", "cute", "x"), "cpu", EvalConfig(stage_warmup_ms=2.5), "/tmp")
    assert job["stage_warmup_ms"] == 2.5


@pytest.mark.parametrize("bad", [-0.1, 50.5])
def test_a_warm_up_outside_0_to_50_ms_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="stage_warmup_ms"):
        EvalConfig(stage_warmup_ms=bad)
