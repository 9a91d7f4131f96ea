"""Whose failure is a runner that cannot use its device? Ours before the submission is
imported (the judge probes the device first), the submission's after. On an H100 on
2026-12-07 every runner forked from a template that had opened NVML failed its first
allocation; that must read as the grader's failure, while a submission that breaks its own
runner's allocation must not be able to pass its failure off as ours."""

from __future__ import annotations

from typing import Any

import pytest

from engine.grading.api import GradeRequest
from engine.grading.judge.judge import Judge
from engine.grading.judge.state import Evaluation
from engine.grading.judge.wire import ProtocolError, Transport
from engine.grading.options import EvalConfig
from engine.grading.parent.evaluate import make_job
from engine.grading.verdict import InfrastructureError, Rejected, decide

RUNNER_SAID = "RuntimeError: invalid argument to exchangeDevice"


class Channel:
    def send(self, kind: str, data: Any) -> None:
        pass


def _judge() -> Judge:
    job = make_job(GradeRequest("p28", "cute", "x"), "cpu", EvalConfig(), "/t")
    return Judge(Evaluation.from_job(job, Channel()), options=None)  # type: ignore[arg-type]


def test_the_preflight_fails_with_what_the_runner_said() -> None:
    asked: list[dict[str, Any]] = []

    def request(message: dict[str, Any]) -> dict[str, Any]:
        asked.append(message)
        return {"op": "error", "error": RUNNER_SAID}

    transport = Transport(False, request)
    transport.preflight()  # a CPU evaluation has no device to probe
    assert asked == []
    transport.cuda = True
    with pytest.raises(ProtocolError, match="exchangeDevice"):
        transport.preflight()
    assert asked == [{"op": "alloc", "sizes": [1]}]


def test_a_runner_that_cannot_use_the_device_before_the_import_is_our_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judge = _judge()
    loaded: list[bool] = []
    runner = type("R", (), {"ready": {}, "request": lambda *a: ({}, [])})()
    monkeypatch.setattr(judge, "start_runner", lambda: runner)
    monkeypatch.setattr(judge.clock, "calibrate", lambda *a: {})
    monkeypatch.setattr(judge, "load", lambda r: loaded.append(True))

    def broken(self: Transport) -> None:
        raise ProtocolError(f"the runner did not allocate the input buffers: {RUNNER_SAID}")

    monkeypatch.setattr(Transport, "preflight", broken)
    with pytest.raises(InfrastructureError) as caught:
        judge.start_submission()
    assert loaded == []  # the submission never ran
    verdict, reason, message = decide(caught.value)
    assert (verdict, reason) == ("error", "infra.device_lost") and "exchangeDevice" in message


def test_a_runner_that_cannot_take_inputs_after_the_import_is_the_submissions_failure() -> None:
    judge = _judge()
    evaluation = judge.evaluation

    class Refusing:
        def ship(self, inputs: list[Any]) -> Any:
            raise ProtocolError(f"the runner did not allocate the input buffers: {RUNNER_SAID}")

    evaluation.transport = Refusing()  # type: ignore[assignment]
    evaluation.runner = type("R", (), {})()  # type: ignore[assignment]
    evaluation.inputs = lambda seed: []  # type: ignore[method-assign]
    with pytest.raises(Rejected) as caught:
        judge.call(1)
    verdict, reason, _ = decide(caught.value)
    assert (verdict, reason) == ("fail", "runner.protocol")
