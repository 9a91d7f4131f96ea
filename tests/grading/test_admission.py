"""Grader replies as the engine admits them (engine/grading/admission.py): a pass or preview
whose runtime is not a finite positive number is a ``timing.invalid`` failure; an error gets
its ``infra.*`` reason; the retry policy tries a transient error again and a deterministic one
(the judge out of memory) once only. Pure functions and the real RetryPolicy."""

from __future__ import annotations

import math

import pytest

from engine.grading.admission import admit, infra_reason
from engine.grading.api import Feedback, GradeRequest
from engine.grading.verdict import InfrastructureError, decide
from engine.retry import RetryPolicy

REQUEST = GradeRequest("p51", "cute", "def solve(): pass\n", request_id="r1", purpose="final")
BAD = (0.0, -2.5, math.nan, math.inf, None)


class OutOfMemoryError(RuntimeError):
    """As torch names the judge's failed allocation (torch.OutOfMemoryError)."""


class Replies:
    """A grader answering ``replies`` in turn (the last one again once they run out)."""

    name = "replies"

    def __init__(self, *replies: Feedback | BaseException) -> None:
        self.replies = list(replies)
        self.calls = 0

    async def grade(self, request: GradeRequest) -> Feedback:
        reply = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def close(self) -> None:
        return None


@pytest.mark.parametrize("verdict", ["pass", "preview"])
@pytest.mark.parametrize("runtime", BAD)
async def test_a_pass_with_an_invalid_runtime_is_a_failed_grading(
    verdict: str, runtime: float | None
) -> None:
    reply = Feedback("pass", impl_median_ms=runtime, eager_median_ms=1.0, speedup=9.0)
    reply.verdict = "preview" if verdict == "preview" else "pass"
    grader = Replies(reply)
    feedback = await RetryPolicy(max_tries=3).grade(grader, REQUEST)
    assert (feedback.verdict, feedback.reason) == ("fail", "timing.invalid")
    assert feedback.speedup is None and "invalid runtime" in feedback.message
    assert grader.calls == 1  # a failure: never retried


@pytest.mark.parametrize("eager", [0.0, math.nan, -1.0])
def test_an_invalid_eager_time_is_no_pass_either(eager: float) -> None:
    feedback = admit(Feedback("pass", impl_median_ms=0.5, eager_median_ms=eager))
    assert (feedback.verdict, feedback.reason) == ("fail", "timing.invalid")


def test_a_valid_pass_is_admitted_unchanged() -> None:
    feedback = Feedback("pass", impl_median_ms=0.5, eager_median_ms=1.0, speedup=2.0)
    assert admit(feedback) is feedback


async def test_an_out_of_memory_judge_is_tried_once_with_an_infra_reason() -> None:
    oom = Feedback.decided(REQUEST, OutOfMemoryError("CUDA out of memory. Tried to allocate"))
    assert (oom.verdict, oom.reason) == ("error", "infra.oom")
    grader = Replies(oom, Feedback("pass", impl_median_ms=1.0))
    feedback = await RetryPolicy(max_tries=3).grade(grader, REQUEST)
    assert (feedback.verdict, feedback.reason, grader.calls) == ("error", "infra.oom", 1)


async def test_an_older_graders_out_of_memory_reply_is_named_and_not_retried() -> None:
    legacy = Feedback("error", "crash", "judge error: OutOfMemoryError: CUDA out of memory.")
    grader = Replies(legacy)
    feedback = await RetryPolicy(max_tries=3).grade(grader, REQUEST)
    assert (feedback.reason, grader.calls) == ("infra.oom", 1)


async def test_a_transient_infrastructure_error_is_tried_again() -> None:
    notes: list[dict[str, object]] = []

    async def note(event: dict[str, object]) -> None:
        notes.append(event)

    grader = Replies(
        ConnectionResetError("grading host went away"),
        Feedback("error", "crash", "grading worker died: killed"),
        Feedback("pass", impl_median_ms=1.0, eager_median_ms=2.0),
    )
    feedback = await RetryPolicy(max_tries=3).grade(grader, REQUEST, note)
    assert feedback.verdict == "pass" and grader.calls == 3 and len(notes) == 2


async def test_a_transient_error_that_never_clears_ends_with_its_infra_reason() -> None:
    grader = Replies(Feedback("error", "crash", "the runner died: signal 9"))
    feedback = await RetryPolicy(max_tries=3).grade(grader, REQUEST)
    assert (feedback.verdict, feedback.reason, grader.calls) == ("error", "infra.judge_crash", 3)


@pytest.mark.parametrize(
    ("reason", "message", "expected"),
    [
        ("crash", "judge error: OutOfMemoryError: CUDA out of memory", "infra.oom"),
        ("crash", "judge error: MemoryError: ", "infra.oom"),
        ("crash", "CUDA error: no CUDA-capable device is detected", "infra.device_lost"),
        ("crash", "Unable to determine the device handle: GPU is lost", "infra.device_lost"),
        ("infra.exception", "ClientOSError: [Errno 104]", "infra.host_lost"),
        ("crash", "grader actor: RayActorError: The actor died unexpectedly", "infra.host_lost"),
        ("crash", "the runner did not start: boom", "infra.judge_crash"),
        ("usage", "unknown problem p99", "usage"),
        ("infra.device_lost", "", "infra.device_lost"),
    ],
)
def test_infrastructure_errors_are_named(reason: str, message: str, expected: str) -> None:
    assert infra_reason(reason, message) == expected
    assert admit(Feedback("error", reason, message)).reason == expected


def test_an_infrastructure_error_raised_with_a_reason_keeps_it() -> None:
    assert decide(InfrastructureError("device gone", "infra.device_lost")) == (
        "error",
        "infra.device_lost",
        "device gone",
    )
    assert decide(InfrastructureError("no result"))[1] == "crash"  # named later by admit
    assert decide(MemoryError("host"))[1] == "infra.oom"


class Standin(Replies):
    """A grading service's backend (``status`` as the server asks)."""

    def status(self) -> dict[str, int]:
        return {"queued": 0}


async def _through_http(grader: Standin) -> Feedback:
    """``REQUEST`` graded by the engine's retry policy through the http client and a real
    grading service on loopback whose backend is ``grader``."""
    from engine.grading.backends.http_client import HttpBackend
    from engine.grading.backends.http_server import start_server

    runner, port = await start_server(grader, "127.0.0.1", 0, "token")
    client = HttpBackend([f"http://127.0.0.1:{port}"], token="token", backoff_s=0.01)
    try:
        return await RetryPolicy(max_tries=2).grade(client, REQUEST)
    finally:
        await client.close()
        await runner.cleanup()


async def test_through_the_http_service_an_oom_is_graded_once_and_a_nan_pass_fails() -> None:
    oom = Standin(Feedback("error", "crash", "judge error: OutOfMemoryError: CUDA out of memory"))
    feedback = await _through_http(oom)
    assert (feedback.verdict, feedback.reason, oom.calls) == ("error", "infra.oom", 1)
    nan = Standin(Feedback("pass", impl_median_ms=math.nan, eager_median_ms=1.0))
    feedback = await _through_http(nan)
    assert (feedback.verdict, feedback.reason, nan.calls) == ("fail", "timing.invalid", 1)
    lost = Standin(
        Feedback("error", "crash", "grading worker died"), Feedback("pass", impl_median_ms=1.0)
    )
    feedback = await _through_http(lost)
    assert (feedback.verdict, lost.calls) == ("pass", 2)  # transient: tried again
