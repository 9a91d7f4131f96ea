"""The one place where the evidence of a grading outcome becomes its verdict.

Whoever ends an evaluation (the judge for its own outcome; the parent and the backends for a
child that gave no result, a request that cannot be graded, a host that failed) names what
happened as *evidence* and asks :func:`decide` for ``(verdict, reason, message)``:

- :class:`Passed` — every check passed: ``pass`` on a GPU, ``preview`` without one;
- :class:`Rejected` — the submission failed a check: ``fail`` with the check's reason code;
- :class:`OverLimit` — a time or memory limit stopped the submission: ``fail``;
- :class:`Crashed` — a process died without a result: ``fail`` once the submission's code had
  run (it may have killed it), ``error`` before (ours);
- :class:`BadRequest` — nothing to grade (unknown problem or DSL): ``error``/``usage``;
- :class:`InfrastructureError` — something of ours failed: ``error``/``crash``;
- any other exception — a bug of the grader's own: ``error``/``crash``, never a pass.

No imports beyond the standard library: the parent decides without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

PREVIEW_MESSAGE = "CPU PREVIEW: every check that can run without a GPU passed (not a scored pass)"
LIMIT_MESSAGES = {
    "timeout": "time limit exceeded",
    "memory": "killed for exceeding the memory limit",
}


class Rejected(Exception):
    """The submission failed a check; ``code`` is the stable reason code, the exception's
    text the detail shown to the agent."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class InfrastructureError(Exception):
    """Something of ours failed (not the submission): the verdict is ``error``, the reason
    ``reason`` (a subclass names its own)."""

    reason = "crash"


@dataclass(frozen=True)
class Passed:
    """Every check passed; ``cuda``: on a GPU (a scored pass), else a CPU preview."""

    cuda: bool


@dataclass(frozen=True)
class OverLimit:
    """A limit stopped the submission: ``limit`` is ``"timeout"`` or ``"memory"``;
    ``during``: the phase it stopped in, when known."""

    limit: Literal["timeout", "memory"]
    during: str | None = None

    def __post_init__(self) -> None:
        if self.limit not in LIMIT_MESSAGES:
            raise ValueError(
                f"OverLimit.limit must be one of {sorted(LIMIT_MESSAGES)}, got {self.limit!r}"
            )


@dataclass(frozen=True)
class Crashed:
    """A process died without a result. ``submission_ran``: the submission's code had run
    by then (its failure), else it died before (ours)."""

    message: str
    submission_ran: bool


@dataclass(frozen=True)
class BadRequest:
    """The request names nothing that can be graded (an unknown problem or DSL)."""

    message: str


Evidence = Passed | OverLimit | Crashed | BadRequest | BaseException


class Decision(NamedTuple):
    """A verdict (``pass``, ``preview``, ``fail`` or ``error``), its reason code (``None``
    for a pass or preview) and the message shown to the agent."""

    verdict: str
    reason: str | None
    message: str


def decide(evidence: Evidence) -> Decision:
    """The verdict ``evidence`` calls for (see the module's docstring)."""
    match evidence:
        case Passed(cuda=True):
            return Decision("pass", None, "scored pass")
        case Passed():
            return Decision("preview", None, PREVIEW_MESSAGE)
        case Rejected():
            return Decision("fail", evidence.code, str(evidence))
        case OverLimit(limit=limit, during=during):
            message = LIMIT_MESSAGES[limit]
            return Decision("fail", limit, f"{message} during {during}" if during else message)
        case Crashed(message=message, submission_ran=ran):
            return Decision("fail" if ran else "error", "crash", message)
        case BadRequest(message=message):
            return Decision("error", "usage", message)
        case InfrastructureError():
            return Decision("error", evidence.reason, str(evidence))
        case BaseException():
            return Decision("error", "crash", f"judge error: {type(evidence).__name__}: {evidence}")
    raise TypeError(f"decide() takes evidence of an outcome, not {type(evidence).__name__}")
