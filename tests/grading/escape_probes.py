"""Escape probes for the grading jail: submissions that try one escape each when imported.

Shared by ``tests/grading/test_grading_jail_escape.py`` (CPU preview, in CI) and
``benchmarks/jail_escape_gpu.py`` (the same probes on a GPU host); no pytest here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

from engine.grading.parent.supervise import REPO_ROOT

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


@contextlib.contextmanager
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
