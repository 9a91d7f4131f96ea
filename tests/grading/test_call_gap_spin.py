"""Between warm-up and timed calls the runner keeps polling for the next request instead of
blocking (``then_spin_s`` on the report), so the judge's checks between two calls do not put
it to sleep before the next call; elsewhere it polls SPIN_S as before."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from engine.grading.api import GradeRequest
from engine.grading.judge.state import Evaluation
from engine.grading.options import EvalConfig
from engine.grading.parent.evaluate import make_job
from engine.grading.runner import loop
from engine.grading.runner.channel import MAX_SPIN_S, SPIN_S, receive, send, spin_after


@pytest.mark.parametrize(
    ("message", "budget"),
    [
        ({"op": "report"}, SPIN_S),
        ({"op": "report", "then_spin_s": 0.05}, 0.05),
        ({"op": "report", "then_spin_s": 60}, MAX_SPIN_S),
        ({"op": "report", "then_spin_s": -1}, SPIN_S),
        ({"op": "report", "then_spin_s": "0.05"}, SPIN_S),
        ({"op": "report", "then_spin_s": True}, SPIN_S),
    ],
)
def test_the_runner_polls_as_long_as_asked_within_its_cap(
    message: dict[str, Any], budget: float
) -> None:
    assert spin_after(message) == budget


def test_the_serving_runner_polls_the_asked_budget_after_that_answer_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    budgets: list[float] = []
    monkeypatch.setattr(loop, "spin_until_readable", lambda sock, s: budgets.append(s))
    judge_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    runner = loop.Runner.__new__(loop.Runner)
    runner.sock, runner.cuda, runner.last, runner.last_inputs = runner_end, True, None, []
    runner.torch = __import__("torch")
    runner.counter = runner.exporter = None
    server = threading.Thread(target=runner.serve)
    server.start()
    with judge_end:
        assert receive(judge_end)[0]["op"] == "ready"
        send(judge_end, {"op": "report", "then_spin_s": 0.05})
        assert receive(judge_end)[0]["op"] == "outputs"
        send(judge_end, {"op": "report"})
        assert receive(judge_end)[0]["op"] == "outputs"
        send(judge_end, {"op": "exit"})
        server.join(5)
    assert budgets == [SPIN_S, 0.05, SPIN_S]


def _evaluation() -> Evaluation:
    job = make_job(GradeRequest("p28", "cute", "x"), "cuda", EvalConfig(), "/t")
    return Evaluation.from_job(job, channel=None)  # type: ignore[arg-type]


def test_the_judge_asks_for_it_between_calls_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MKB_CALL_GAP_SPIN_MS", raising=False)
    evaluation = _evaluation()
    assert evaluation.report_message() == {"op": "report"}  # correctness, evidence
    evaluation.between_calls = True  # Judge.timed_calls: warm-up and timed calls
    assert evaluation.report_message() == {"op": "report", "then_spin_s": 0.1}
    assert evaluation.report_message(False) == {"op": "report"}
    monkeypatch.setenv("MKB_CALL_GAP_SPIN_MS", "0")  # A/B: the runner's default again
    assert evaluation.report_message() == {"op": "report"}
    monkeypatch.setenv("MKB_CALL_GAP_SPIN_MS", "junk")
    assert evaluation.report_message() == {"op": "report"}


def test_the_judge_asks_through_the_warm_up_and_timed_calls_and_no_longer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Judge.timed_calls`` holds ``between_calls`` through its warm-up and timed calls (so
    their reports ask for the poll) and drops it before the score is settled."""
    from engine.grading.judge.judge import Judge
    from engine.grading.judge.output_checks import Draw

    class Channel:
        def send(self, kind: str, data: Any) -> None:
            pass

    job = make_job(GradeRequest("p28", "cute", "x"), "cpu", EvalConfig(), "/t")
    evaluation = Evaluation.from_job(job, Channel())
    judge = Judge(evaluation, options=None)  # type: ignore[arg-type]
    seen: list[bool] = []

    def call(seed: int, timed: bool = False, warm: bool = False) -> Draw:
        seen.append(evaluation.report_message(None).get("then_spin_s") == 0.1)
        return Draw(None, [])

    monkeypatch.delenv("MKB_CALL_GAP_SPIN_MS", raising=False)
    monkeypatch.setattr(judge, "call", call)
    monkeypatch.setattr(judge.checks, "check_sampled", lambda *a: None)
    monkeypatch.setattr(judge.checks, "check_anchor", lambda *a: True)
    settled: list[bool] = []
    monkeypatch.setattr(
        judge.clock, "settle_timing", lambda: settled.append(evaluation.between_calls)
    )
    expected = {s: None for s in [*job["seeds"]["warmup"], *job["seeds"]["timed"]]}
    judge.timed_calls(runner=type("R", (), {"pid": 1})(), expected=expected)  # type: ignore[arg-type]
    assert seen == [True] * len(expected)
    assert settled == [False] and evaluation.report_message() == {"op": "report"}
