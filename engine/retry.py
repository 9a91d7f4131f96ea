"""The one retry policy: only infrastructure failures are retried, ``max_tries`` times each.

What is retried, and where it is recorded:

- a **grading** that ends in a transient infrastructure error (verdict ``"error"`` or a
  backend exception; not ``infra.oom`` or ``usage``, which would end the same) is graded
  again by whoever asked for it, through :meth:`RetryPolicy.grade`;
  each try is one ``grading_jobs`` row of the same submission (the recording backend never
  retries by itself) and each retry an ``attempt.grading_retry`` event;
- an **execution try** that failed for a transient infrastructure reason (the sandbox or the
  endpoint, never the agent) is run again in a fresh sandbox by the attempt runner
  (:meth:`RetryPolicy.retry_execution`), each try an ``attempt.try_finished`` event;
- an **attempt** that ended ``failed`` for infrastructure, when its runner did not spend the
  tries itself (``AttemptOutcome.retryable``), is rerun by the scheduler
  (:meth:`RetryPolicy.rerun_now`; ``attempts.tries`` counts them, ``attempt_retrying``
  records each), and a later run resumes interrupted or failed attempts
  (:meth:`RetryPolicy.resume`).

A verdict about the agent's work (fail, a timeout of its budget) is never retried. The
numbers come from the experiment's ``[retry]`` table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from engine.grading.admission import admit, retryable
from engine.grading.api import Feedback, GradeRequest, GradingBackend

RetrySink = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """How often an infrastructure failure is tried again (``max_tries`` tries in all)."""

    max_tries: int = 3
    rerun_failed: bool = True  # rerun attempts that failed for infrastructure

    @classmethod
    def from_config(cls, config: Any) -> RetryPolicy:
        """The policy of an experiment config's ``[retry]`` table."""
        return cls(max_tries=config.max_tries, rerun_failed=config.rerun_failed)

    # -- gradings ------------------------------------------------------------------------------
    async def grade(
        self, backend: GradingBackend, request: GradeRequest, on_retry: RetrySink | None = None
    ) -> Feedback:
        """Grade, trying again after a transient infrastructure error, up to ``max_tries``
        tries. Every reply is admitted first (``engine/grading/admission.py``: a pass without
        a valid runtime is a ``timing.invalid`` failure, an error gets its ``infra.*``
        reason); a deterministic one (``infra.oom``, ``usage``) is not tried again."""
        feedback = Feedback(verdict="error", reason="infra.not_run", request_id=request.request_id)
        tries = max(1, self.max_tries)
        for number in range(1, tries + 1):
            try:
                feedback = await backend.grade(request)
            except Exception as exc:  # noqa: BLE001 - a backend failure is an infrastructure error
                feedback = Feedback(
                    verdict="error",
                    reason="infra.exception",
                    message=f"{type(exc).__name__}: {exc}",
                    request_id=request.request_id,
                    problem_id=request.problem_id,
                    dsl=request.dsl,
                )
            feedback = admit(feedback)
            if not retryable(feedback):
                return feedback
            if number < tries and on_retry is not None:
                await on_retry(
                    {
                        "kind": "grading_retry",
                        "purpose": request.purpose,
                        "request_id": request.request_id,
                        "try": number,
                        "message": feedback.message or feedback.reason or "",
                    }
                )
        return feedback

    # -- execution tries (the attempt runner) --------------------------------------------------
    def execution_tries(self) -> range:
        """The execution try numbers an attempt runner may use."""
        return range(1, max(1, self.max_tries) + 1)

    def retry_execution(self, try_number: int, *, transient: bool, stopped: bool) -> bool:
        """Whether a try that ended so is followed by another one."""
        return transient and not stopped and try_number < self.max_tries

    # -- attempts (the scheduler) --------------------------------------------------------------
    def rerun_now(self, state: str, *, retryable: bool, try_number: int) -> bool:
        """Whether the scheduler runs an attempt again at once after this try."""
        return (
            state == "failed" and retryable and self.rerun_failed and (try_number < self.max_tries)
        )

    def resume(self, state: str, tries: int) -> bool:
        """Whether a later run resumes an attempt left ``interrupted`` or ``failed``."""
        if state == "interrupted":
            return tries < self.max_tries or self.max_tries <= 0
        if state == "failed":
            return self.rerun_failed and tries < self.max_tries
        raise ValueError(f"not a resumable state: {state}")
