"""What every trusted process of the grader needs of its children: a secret-free environment
and the tail of a child's log. Shared by the parent (its judge children) and the judge (its
runners), so neither zone imports the other for it."""

from __future__ import annotations

import os
from pathlib import Path

LOG_TAIL_CHARS = 4000
# environment variables whose names hold one of these never reach a child
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY", "ACCESS_KEY", "CREDENTIAL")


def read_tail(path: str | Path | None, chars: int = LOG_TAIL_CHARS) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - chars * 4))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return text[-chars:]


PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent: int | None = None) -> bool:
    """Have the kernel SIGKILL this process when the thread that started it ends (Linux
    ``PR_SET_PDEATHSIG``), so a grading never outlives a SIGKILLed engine: the warm parent
    dies with the backend, each judge with the warm parent, and a judge's jailed runner with
    its judge (bubblewrap's ``--die-with-parent``). ``expected_parent``: if the parent is
    already gone (this process was reparented), exit now. False where unsupported."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(70)  # the parent died before the request took effect
    return True
