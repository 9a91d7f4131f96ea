"""What a grader's reply may claim before the engine believes it: the one check every
backend's feedback passes where it enters the engine (:func:`admit`, applied by
:meth:`engine.retry.RetryPolicy.grade`, the recording backend, the bundle re-grade and
``mkb noise``; the http client asks :func:`retryable` before it tries another host).

- **Timings.** A pass or preview carries a runtime (``impl_median_ms``) that is a finite,
  positive number, and an eager time that is one when given. Anything else (0, negative,
  NaN, ±inf, missing) is no result: the grading becomes ``fail`` with reason
  :data:`INVALID_TIMING`, never a pass and never a crash downstream.
- **Infrastructure errors.** A grading that ends ``error`` failed for the grader's own
  reasons; its reason is made one of :data:`INFRA_REASONS` (from the reason the grader gave,
  else from its message, so a reply of an older grader is named too): ``infra.oom`` (the
  judge ran out of device or host memory), ``infra.device_lost`` (the GPU went away),
  ``infra.host_lost`` (the grading host, worker or connection was lost) or
  ``infra.judge_crash`` (the judge died or raised). :data:`DETERMINISTIC` ones (out of memory
  at the same point, a request that names nothing gradable) are not retried; the others are.

An attempt whose final grading ends so is stored ``ungraded`` with that reason
(:data:`UNGRADED_REASONS`), never ``fail``: see ``docs/grading.md``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from engine.grading.api import Feedback

INVALID_TIMING = "timing.invalid"
INFRA_OOM = "infra.oom"
INFRA_DEVICE_LOST = "infra.device_lost"
INFRA_HOST_LOST = "infra.host_lost"
INFRA_JUDGE_CRASH = "infra.judge_crash"
INFRA_MEMORY_UNFIT = "infra.memory_unfit"  # its plan cannot fit the card: refused before it
INFRA_REASONS = (
    INFRA_OOM, INFRA_DEVICE_LOST, INFRA_HOST_LOST, INFRA_JUDGE_CRASH, INFRA_MEMORY_UNFIT
)
USAGE = "usage"  # nothing to grade (an unknown problem or DSL): the grader's, not the agent's
# trying again gives the same end: never retried
DETERMINISTIC = frozenset({INFRA_OOM, INFRA_MEMORY_UNFIT, USAGE})
# reasons an attempt is stored ``ungraded`` with (the grader's fault, never the agent's)
UNGRADED_REASONS = (*INFRA_REASONS, USAGE, INVALID_TIMING)

_OOM = ("outofmemoryerror", "out of memory", "memoryerror", "cuda_error_out_of_memory")
_DEVICE_LOST = (
    "gpu is lost",
    "device lost",
    "devices unavailable",
    "no cuda-capable device",
    "cuda_error_no_device",
    "unable to determine the device handle",
    "fallen off the bus",
)
_HOST_LOST = (
    "connection",
    "worker died",
    "actor died",
    "actordied",
    "node died",
    "nodedied",
    "workercrashed",
    "host lost",
    "backend closed",
    "unreachable",
    "grading failed after",
)


def runtime_defect(value: Any) -> str | None:
    """Why ``value`` is not a usable runtime in ms (``None`` when it is one): missing, not a
    number, NaN, infinite, zero or negative."""
    if value is None:
        return "missing"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "not a number"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "infinite"
    if value == 0:
        return "zero"
    if value < 0:
        return "negative"
    return None


def timing_defect(impl_ms: Any, eager_ms: Any = None) -> str | None:
    """What is wrong with a passing grading's times (``None``: nothing)."""
    if (why := runtime_defect(impl_ms)) is not None:
        return f"runtime {why} ({impl_ms!r} ms)"
    if eager_ms is not None and (why := runtime_defect(eager_ms)) is not None:
        return f"eager time {why} ({eager_ms!r} ms)"
    return None


def infra_reason(reason: str | None, message: str) -> str:
    """The ``infra.*`` reason (or ``usage``) of a grading that ended ``error``."""
    if reason in INFRA_REASONS or reason == USAGE:
        return reason
    text = message.lower()
    if any(k in text for k in _OOM):
        return INFRA_OOM
    if any(k in text for k in _DEVICE_LOST):
        return INFRA_DEVICE_LOST
    if reason == "infra.exception" or any(k in text for k in _HOST_LOST):
        return INFRA_HOST_LOST
    return INFRA_JUDGE_CRASH


def retryable(feedback: Feedback) -> bool:
    """Whether a grading that ended so may end otherwise if tried again."""
    return feedback.verdict == "error" and feedback.reason not in DETERMINISTIC


def admit(feedback: Feedback) -> Feedback:
    """``feedback`` as the engine may believe it (see the module's docstring); idempotent."""
    if feedback.verdict in ("pass", "preview"):
        defect = timing_defect(feedback.impl_median_ms, feedback.eager_median_ms)
        if defect is None:
            return feedback
        return dataclasses.replace(
            feedback,
            verdict="fail",
            reason=INVALID_TIMING,
            message=f"the grader reported a {feedback.verdict} with an invalid {defect}: "
            "no result (the grader's fault, not the submission's)",
            speedup=None,
        )
    if feedback.verdict == "error":
        reason = infra_reason(feedback.reason, feedback.message)
        if reason != feedback.reason:
            return dataclasses.replace(feedback, reason=reason)
    return feedback
