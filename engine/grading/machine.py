"""The name of the machine a grading ran on, as stored with every grading (``Feedback.host``,
the slot ``machine:label`` and the band's host): the host name and the first eight hex digits
of the kernel's boot id.

Host names alone do not tell machines apart: every lent GPU machine of one kind may be called
``vm``, and a paired job cut at a call's limit and resumed on the next machine would then put
one pair's two gradings on "the same slot" of two machines (docs/gpu-runs/2026-12-07-template-
gpu-paired). The boot id changes with every boot, so a machine rebooted between two gradings
counts as another machine too: its clocks and caches start afresh, and the analysis keeps the
two apart rather than pool them.
"""

from __future__ import annotations

import functools
import socket
from pathlib import Path

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@functools.cache
def machine_name() -> str:
    """``hostname#bootid8`` (``hostname`` alone where the boot id cannot be read)."""
    return name_of(socket.gethostname(), _boot_id())


def name_of(hostname: str, boot_id: str) -> str:
    """The machine's name from its host name and boot id (``:`` never appears in it: it
    separates the machine from a slot's label)."""
    host = hostname.replace(":", "_") or "localhost"
    tag = "".join(ch for ch in boot_id.lower() if ch in "0123456789abcdef")[:8]
    return f"{host}#{tag}" if tag else host


def _boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""
