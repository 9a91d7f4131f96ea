"""Warm calls (``EvalConfig.warm_calls``): before each warm-up and timed call, both runners run
an untimed call on the previous inputs, so calls are timed with their code and data in the
caches. Graded for real in CPU preview (a warm local backend, forked judges, jailed runners).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.grading.api import Feedback, GradeRequest
from engine.grading.backends.local import LocalBackend
from engine.grading.options import PREVIEW_COUNTS, EvalConfig
from engine.grading.parent.evaluate import make_job
from tests.grading.conftest import SUITE_CONFIG

# slow: real gradings; one xdist group: the module's own warm backend starts once, on one worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("warm_calls")]

FIXTURES = Path(__file__).parent / "fixtures"
WARMUP, TIMED = PREVIEW_COUNTS[1], PREVIEW_COUNTS[2]


@pytest.fixture(scope="module")
def grade_warm() -> Iterator[Callable[..., Feedback]]:
    """Grade with warm calls on (a warm CPU-preview backend of its own)."""
    runner = asyncio.Runner()
    config = EvalConfig(**SUITE_CONFIG, warm_calls=True)  # type: ignore[arg-type]
    backend = LocalBackend(gpus=None, preview_slots=1, config=config, preload_dsls=False)
    runner.run(backend.start())

    def run(source: str, problem: str = "p28") -> Feedback:
        return runner.run(backend.grade(GradeRequest(problem, "cute", source, device="cpu")))

    yield run
    runner.run(backend.close())
    runner.close()


def test_each_warmup_and_timed_call_follows_a_warm_call_on_both_sides(grade_warm) -> None:
    feedback = grade_warm((FIXTURES / "honest" / "p28_plain.py").read_text())
    assert feedback.verdict == "preview", (feedback.reason, feedback.message)
    # every warm-up and timed call had previous inputs to warm on (the correctness draws
    # precede the submission's; the eager side's first warm-up call has none)
    assert feedback.clock["warm_calls"] == {
        "submission": WARMUP + TIMED,
        "eager": WARMUP + TIMED - 1,
    }


def test_a_warm_call_cannot_see_the_next_inputs(grade_warm) -> None:
    """A submission that answers only from results it worked out, outside the clock, for inputs
    it found staged in the runner: the warm call runs before the next inputs exist there."""
    feedback = grade_warm((FIXTURES / "warm" / "peeks_next_inputs.py").read_text())
    assert feedback.verdict == "fail"
    assert feedback.reason == "correctness.recheck", (feedback.reason, feedback.message)
    assert "warmup call 0" in feedback.message


def test_a_warm_call_that_raises_is_a_crash(grade_warm) -> None:
    feedback = grade_warm((FIXTURES / "warm" / "raises_in_sixth_call.py").read_text())
    assert feedback.verdict == "fail"
    assert feedback.reason == "crash"
    assert "untimed warm call" in feedback.message and "sixth call" in feedback.message


def test_in_place_problems_get_no_warm_calls(grade_warm) -> None:
    """Their previous inputs were written by the previous call: no second call on them."""
    feedback = grade_warm((FIXTURES / "honest" / "p73_inplace.py").read_text(), "p73")
    assert feedback.verdict == "preview", (feedback.reason, feedback.message)
    assert "warm_calls" not in feedback.clock


def test_warm_calls_are_off_unless_asked_for_and_reach_the_job() -> None:
    request = GradeRequest("p28", "cute", "x")
    assert make_job(request, "cpu", EvalConfig(), "/t")["warm_calls"] is False
    assert make_job(request, "cpu", EvalConfig(warm_calls=True), "/t")["warm_calls"] is True


def test_mkb_grade_says_when_warm_calls_ran() -> None:
    from app.commands.grade import render

    feedback = {"verdict": "pass", "problem_id": "p36", "dsl": "tirx", "device": "cuda"}
    assert "warm calls" not in render({**feedback, "clock": {}})
    shown = render({**feedback, "clock": {"warm_calls": {"submission": 60, "eager": 59}}})
    assert "warm calls (untimed, before each timed call): 60 submission, 59 eager" in shown
