"""Busy polling before a wait sleeps (GPU runners and judges): it sees a message at once and
gives up after its budget."""

from __future__ import annotations

import socket
import threading
import time

from engine.grading.runner import spin_until_readable


def test_spin_returns_false_after_its_budget_when_nothing_comes() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        start = time.perf_counter()
        assert spin_until_readable(a, 0.02) is False
        assert 0.02 <= time.perf_counter() - start < 1.0


def test_spin_sees_a_message_sent_while_it_polls() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        sender = threading.Timer(0.005, lambda: b.send(b"call"))
        sender.start()
        start = time.perf_counter()
        assert spin_until_readable(a, 5.0) is True
        assert time.perf_counter() - start < 2.0  # long before the budget ran out
        assert a.recv(16) == b"call"
        sender.join()


def test_spin_with_no_budget_only_looks() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        assert spin_until_readable(a, 0.0) is False
        b.send(b"x")
        assert spin_until_readable(a, 0.0) is True
