"""The grading jail, attacked through the real grading path (warm local backend, CPU preview).

Each probe is a submission that tries one escape when it is imported. If the escape works it
computes the honest result (a preview); if not it returns zeros (a correctness failure). In
the jail every probe must fail; the same probe graded with ``unsafe_no_jail`` is the positive
control showing the probe can succeed on this host.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.grading.api import Feedback, GradeRequest
from engine.grading.backends.local import LocalBackend
from engine.grading.options import EvalConfig
from tests.grading.conftest import SUITE_CONFIG
from tests.grading.escape_probes import PROBES, probe_source, probes
from tests.grading.escape_probes import canaries as planted_canaries

# slow: real gradings; one xdist group: the module's unjailed backend starts once, on one worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("grading_jail_escape")]


@pytest.fixture(scope="module")
def canaries() -> Iterator[dict[str, str]]:
    with planted_canaries() as found:
        yield found


@pytest.fixture(scope="module")
def grade_unjailed() -> Iterator[Callable[[str], Feedback]]:
    runner = asyncio.Runner()
    backend = LocalBackend(
        gpus=None,
        config=EvalConfig(**{**SUITE_CONFIG, "unsafe_no_jail": True}),
        preload_dsls=False,
    )
    runner.run(backend.start())

    def run(source: str) -> Feedback:
        return runner.run(backend.grade(GradeRequest("p28", "cute", source, device="cpu")))

    yield run
    runner.run(backend.close())
    runner.close()


@pytest.mark.parametrize("probe", PROBES)
def test_the_jail_stops_the_probe(grade, canaries, probe: str) -> None:
    feedback = grade(probe_source(probes(canaries)[probe]))
    assert feedback.jailed is True
    assert feedback.clock.get("runner_from_template") is True  # a child of the slot's template
    assert not Path(canaries["planted"]).exists()
    assert (feedback.verdict, feedback.reason) == ("fail", "correctness.tolerance"), (
        feedback.verdict,
        feedback.reason,
        feedback.message,
    )


def _can_escape_here(probe: str) -> bool:
    """Whether this host lets the probe succeed at all (root for uid 0, a route out for UDP)."""
    if probe == "uid_zero":
        return os.getuid() == 0
    if probe == "udp_to_internet":
        try:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53))
        except OSError:
            return False
    return True


def test_without_the_jail_every_probe_succeeds(grade_unjailed, canaries) -> None:
    """The positive control, in one grading (an unjailed grading starts a fresh runner, ~4 s
    of CPU): a submission that tries every probe this host allows, and computes the honest
    result only if each one escaped. When it fails, each probe is graded alone to name it."""
    found = probes(canaries)
    chosen = [p for p in PROBES if _can_escape_here(p)]
    assert {"read_project_tree", "write_project_tree", "engine_port_on_loopback"} <= set(chosen)
    # the write probe is False by design (what counts is the host file): its write comes first
    body = " and ".join(
        f"({found[p]} or True)" if p == "write_project_tree" else f"({found[p]})"
        for p in sorted(chosen, key=lambda p: p != "write_project_tree")
    )
    feedback = grade_unjailed(probe_source(body))
    assert feedback.jailed is False
    if feedback.verdict != "preview":
        stopped = [
            p
            for p in chosen
            if p != "write_project_tree"  # its verdict is a fail by design
            and grade_unjailed(probe_source(found[p])).verdict != "preview"
        ]
        pytest.fail(f"probes that did not escape without the jail: {stopped} ({feedback.reason})")
    assert Path(canaries["planted"]).exists()  # the host file was written
    Path(canaries["planted"]).unlink()
