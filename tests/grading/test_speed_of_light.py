"""Speed of light in the feedback: the problem's SOL on the grading GPU, % of SOL, and the
flag for results faster than SOL (impossible: a grading bug or a cheat)."""

from __future__ import annotations

import pytest

from engine.grading.api import Feedback
from engine.grading.judge.breakdown import CallBreakdown
from engine.grading.judge.evidence import CallEvidence
from engine.grading.judge.state import CallFigures, Evaluation
from problems import registry
from problems.sol import H200, sol_estimate

SOL_MS = sol_estimate(registry.get("p28").cost("full"), H200).seconds * 1e3


class _Evidence(CallEvidence):
    """The judge's evidence checks with their evaluation's result at hand."""

    @property
    def result(self) -> dict:
        return self.evaluation.result


def _evaluation(device: str, impl_ms: float, cuda: bool = True) -> _Evidence:
    result = {"device": device, "impl_median_ms": impl_ms}
    state = Evaluation({}, registry.get("p28"), None, cuda, "full", result)  # type: ignore[arg-type]
    figures = CallFigures(CallBreakdown(result))
    return _Evidence(state, figures, call=None, check_anchor=None)  # type: ignore[arg-type]


def test_sol_is_reported_for_a_known_gpu() -> None:
    evaluation = _evaluation("NVIDIA H200", impl_ms=10 * SOL_MS)
    evaluation.speed_of_light()
    assert evaluation.result["sol_ms"] == pytest.approx(SOL_MS)
    assert evaluation.result["sol_hardware"] == "NVIDIA H200"
    assert "flags" not in evaluation.result
    fb = Feedback(verdict="pass", impl_median_ms=10 * SOL_MS, sol_ms=SOL_MS)
    assert fb.pct_of_sol == pytest.approx(10.0)


def test_faster_than_sol_is_flagged_not_failed() -> None:
    evaluation = _evaluation("NVIDIA H200", impl_ms=0.5 * SOL_MS)
    evaluation.speed_of_light()
    assert evaluation.result["flags"] == ["sol.faster_than_sol"]
    assert "verdict" not in evaluation.result  # the verdict is the contract's alone


def test_no_sol_without_a_gpu_from_the_table() -> None:
    for device, cuda in (("NVIDIA GeForce RTX 4090", True), ("cpu (preview)", False)):
        evaluation = _evaluation(device, impl_ms=SOL_MS / 100, cuda=cuda)
        evaluation.speed_of_light()
        assert "sol_ms" not in evaluation.result and "flags" not in evaluation.result


def test_flags_and_sol_survive_the_feedback_round_trip() -> None:
    fb = Feedback(verdict="pass", sol_ms=0.1, flags=["sol.faster_than_sol"])
    again = Feedback.from_dict(fb.to_dict())
    assert again.flags == ["sol.faster_than_sol"] and again.sol_ms == 0.1
