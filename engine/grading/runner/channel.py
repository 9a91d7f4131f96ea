"""The runner's side of its socket to the judge: JSON messages with file descriptors riding
along (``SCM_RIGHTS``), and the busy poll both ends do before blocking. A file of the runner's
zone: standard library only, copied into the jail beside :mod:`loop`."""

from __future__ import annotations

import array
import json
import socket
import time
from typing import Any

MAX_MESSAGE = 1 << 20
# On a GPU, after each message both ends poll (busy) this long for the next one before they
# block: a process that sleeps in the kernel wakes with a cold core, and a call after a 2 ms
# sleep spent ~55 µs more host time on the H200 (docs/gpu-runs/2026-12-03-p52-fp8-gemm/,
# call_cadence.jsonl, "blocked").
SPIN_S = 0.01
# The judge asks for a longer poll after the report of a warm-up or timed call
# (``then_spin_s``, at most this): its checks and the next call's inputs took 3–13 ms per call
# on the H100 for p28 and p36 (2026-12-07, the quiet run's timing phases), around SPIN_S, so
# a runner often fell asleep just before ``stage`` woke it for the timed call.
MAX_SPIN_S = 0.1


def spin_after(message: dict[str, Any]) -> float:
    """How long to poll before blocking once ``message`` is answered (``then_spin_s``, within
    0..MAX_SPIN_S; SPIN_S when absent or junk)."""
    value = message.get("then_spin_s")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return min(float(value), MAX_SPIN_S)
    return SPIN_S


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message, default=str).encode()
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.send(data)


def spin_until_readable(sock: socket.socket, seconds: float = SPIN_S) -> bool:
    """Poll ``sock`` without sleeping for up to ``seconds``; True once it is readable."""
    import select

    poller = select.poll()
    poller.register(sock, select.POLLIN)
    clock = time.perf_counter
    end = clock() + seconds
    while True:
        if poller.poll(0):
            return True
        if clock() >= end:
            return False


def receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 8)
    if not data:
        raise EOFError("the judge closed the socket")
    return json.loads(data), list(fds)
