"""A Ray cluster as an operator starts one: ``ray start --head`` and ``ray start --address`` on
loopback with token authentication. A node without the token, or with a wrong one, cannot
join; one with it can, and the engine grades on both nodes through it (simulated grader).

The nodes run in a temporary directory of their own; at the end every process whose command
line names that directory (the nodes this test started, and nothing else) is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

if importlib.util.find_spec("ray") is None:
    pytest.skip("the ray extra is not installed (pip install -e '.[ray]')", allow_module_level=True)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.ray_local import NODE_IP, experiment_toml, run_ray_experiment  # noqa: E402
from engine.grading.backends.fleet import free_port  # noqa: E402

pytestmark = pytest.mark.slow
RAY = str(Path(sys.executable).with_name("ray"))


def ray_start(
    temp: str, token: str | None, *args: str, connect_tries: int | None = None
) -> subprocess.CompletedProcess[str]:
    """``ray start`` with ``token`` (None: auth off); ``connect_tries``: how often a joining node
    tries the head's GCS, one second apart (Ray's default is 20: a refused join took ~20 s)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_AUTH_MODE"] = "token" if token is not None else "disabled"
    if token:
        env["RAY_AUTH_TOKEN"] = token
    if connect_tries is not None:
        env["RAY_gcs_server_port_wait_time_s"] = str(connect_tries)
    return subprocess.run(
        [
            RAY,
            "start",
            f"--node-ip-address={NODE_IP}",
            "--num-cpus=0",
            "--num-gpus=1",
            f"--memory={1024**3}",
            f"--temp-dir={temp}",
            "--disable-usage-stats",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def started_in(temp: str) -> list[int]:
    """The processes whose command line names ``temp`` (the nodes this test started)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/cmdline", "rb") as fh:
                if temp.encode() in fh.read():
                    found.append(int(entry))
    return found


def alive_nodes(temp: str) -> int:
    """Raylets running from ``temp``."""
    count = 0
    for pid in started_in(temp):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as fh:
            count += b"raylet/raylet" in fh.read().split(b"\0")[0]
    return count


@pytest.fixture
def head() -> Iterator[tuple[str, str, str]]:
    temp = tempfile.mkdtemp(prefix="mkbray-", dir="/tmp")
    token = secrets.token_hex(16)
    port = free_port()
    try:
        out = ray_start(temp, token, "--head", f"--port={port}", "--include-dashboard=false")
        assert out.returncode == 0, out.stderr[-3000:]
        yield f"{NODE_IP}:{port}", token, temp
    finally:
        for pid in started_in(temp):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def test_only_a_node_with_the_token_joins_and_the_engine_grades_there(
    head: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    address, token, temp = head
    assert alive_nodes(temp) == 1
    for bad in (None, secrets.token_hex(16)):  # no token (auth off), a wrong token
        # a refused token is refused on every try: 3 tries, not Ray's 20 (one second apart)
        out = ray_start(temp, bad, f"--address={address}", connect_tries=3)
        assert out.returncode != 0, out.stdout[-2000:]
        assert "InvalidAuthToken" in out.stderr, out.stderr[-2000:]  # refused for its token
        time.sleep(1)
        assert alive_nodes(temp) == 1  # it did not join
    out = ray_start(temp, token, f"--address={address}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert alive_nodes(temp) == 2

    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # restored afterwards
    monkeypatch.setenv("MKB_RAY_TOKEN", token)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    toml = experiment_toml(
        address,
        replicates=1,
        submissions=2,
        sandboxes=4,
        grading_slots=4,
        simulated_s=(0.05, 0.2),
        extra='token_env = "MKB_RAY_TOKEN"\nheartbeat_s = 0.5',
    )
    run = asyncio.run(run_ray_experiment(tmp_path / "cli.sqlite", toml))
    assert run["summary"].by_state == {"finished": 4}
    assert run["status"]["graders"] == 2 and run["status"]["nodes"] == 2
    assert run["status"]["completed"] == run["expected_gradings"] == 12
