"""Why a judge stops: the submission failed a check, or something of ours failed."""

from __future__ import annotations


class Rejected(Exception):
    """The submission failed a check; ``code`` is the stable reason code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class InfrastructureError(Exception):
    """Something of ours failed (not the submission): the verdict is ``error``."""
