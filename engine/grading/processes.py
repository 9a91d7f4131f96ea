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
