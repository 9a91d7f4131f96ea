"""The grading jail, attacked through the real grading path (warm local backend, CPU preview).

Each probe is a submission that tries one escape when it is imported. If the escape works it
computes the honest result (a preview); if not it returns zeros (a correctness failure). In
the jail every probe must fail; the same probe graded with ``unsafe_no_jail`` is the positive
control showing the probe can succeed on this host.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.grading.api import Feedback, GradeRequest
from engine.grading.evaluate import EvalConfig
from engine.grading.local import LocalBackend
from engine.grading.supervise import REPO_ROOT
from tests.grading.conftest import SUITE_CONFIG

HONEST = """
def honest(hidden_states, residual, weight):
    s = hidden_states.float() + residual.float()
    inv = torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + 1e-5)
    return (s * inv * weight.float()).to(hidden_states.dtype)


def solve(hidden_states, residual, weight):
    if ESCAPED:
        return honest(hidden_states, residual, weight)
    return torch.zeros_like(hidden_states)
"""


def probe_source(body: str) -> str:
    """A submission whose module-level ``ESCAPED`` is what ``body`` (an expression) says."""
    return (
        "import os, socket, pathlib\nimport torch\n\n"
        "def _escaped():\n"
        "    try:\n"
        f"        return bool({body})\n"
        "    except Exception:\n"
        "        return False\n\n"
        "ESCAPED = _escaped()\n" + HONEST
    )


@pytest.fixture(scope="module")
def canaries() -> Iterator[dict[str, str]]:
    """Canary files in the project tree, a store-like folder and $HOME, and a host server."""
    token = secrets.token_hex(8)
    store_dir = Path(f"/tmp/mkb-store-canary-{token}")
    store_dir.mkdir()
    home = Path(os.path.expanduser("~"))
    paths = {
        "project": REPO_ROOT / f".mkb-canary-{token}",
        "store": store_dir / "mkb.sqlite",
        "home": home / f".mkb-canary-{token}",
    }
    for path in paths.values():
        path.write_text("canary")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    planted = REPO_ROOT / f".mkb-planted-{token}"
    yield {
        **{k: str(v) for k, v in paths.items()},
        "port": str(server.getsockname()[1]),
        "planted": str(planted),
        "host_pid": str(os.getpid()),
    }
    stop.set()
    thread.join()
    server.close()
    for path in [*paths.values(), planted]:
        path.unlink(missing_ok=True)
    store_dir.rmdir()


def probes(c: dict[str, str]) -> dict[str, str]:
    return {
        "read_project_tree": f"pathlib.Path({c['project']!r}).read_text() == 'canary'",
        "read_store": f"pathlib.Path({c['store']!r}).read_text() == 'canary'",
        "read_home": f"pathlib.Path({c['home']!r}).read_text() == 'canary'",
        "list_project_tree": f"'README.md' in os.listdir({str(REPO_ROOT)!r})",
        # the jail may let it write into its own private root: what counts is the host file
        "write_project_tree": f"pathlib.Path({c['planted']!r}).write_text('x') == 1 and False",
        # spelled so the static rules (which refuse /proc paths) let it through
        "see_host_process": "os.path.exists(os.sep.join(['', ''.join(['p', 'r', 'o', 'c']), "
        f"'{c['host_pid']}', 'status']))",
        "udp_to_internet": "socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
        ".sendto(b'x', ('8.8.8.8', 53)) == 1",
        "engine_port_on_loopback": "socket.create_connection(('127.0.0.1', "
        f"{c['port']}), timeout=2) is not None",
        "uid_zero": "os.getuid() == 0",
    }


PROBES = [
    "read_project_tree",
    "read_store",
    "read_home",
    "list_project_tree",
    "write_project_tree",
    "see_host_process",
    "udp_to_internet",
    "engine_port_on_loopback",
    "uid_zero",
]


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
    assert not Path(canaries["planted"]).exists()
    assert (feedback.verdict, feedback.reason) == ("fail", "correctness.tolerance"), (
        feedback.verdict,
        feedback.reason,
        feedback.message,
    )


@pytest.mark.parametrize("probe", PROBES)
def test_without_the_jail_the_probe_succeeds(grade_unjailed, canaries, probe: str) -> None:
    """The positive control: the probe is able to escape when nothing stops it."""
    if probe == "uid_zero" and os.getuid() != 0:
        pytest.skip("the tests do not run as root here")
    if probe == "udp_to_internet":
        try:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53))
        except OSError:
            pytest.skip("this host has no route to a non-loopback address")
    feedback = grade_unjailed(probe_source(probes(canaries)[probe]))
    assert feedback.jailed is False
    if probe == "write_project_tree":
        assert Path(canaries["planted"]).exists()  # the host file was written
        Path(canaries["planted"]).unlink()
    else:
        assert feedback.verdict == "preview", (feedback.reason, feedback.message)
