"""Verify the agent jail on this host: start a real local sandbox, probe it from inside.

``mkb sandbox check`` prints one line per property (pass/fail). Each probe runs through the
Harbor environment API (``exec``), exactly as an agent's commands do.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harbor.models.task.config import EnvironmentConfig as TaskEnvironment
from harbor.models.trial.paths import TrialPaths

from engine.sandbox.agent_jail import PROJECT_ROOT
from engine.sandbox.local_ns import LocalNamespaceEnvironment

PROBE_TIMEOUT_S = 20


@dataclass(frozen=True)
class Check:
    """One verified property."""

    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class Probe:
    name: str
    command: str
    passes: Callable[[int, str], bool]


def _hidden(path: Path) -> str:
    return f"test ! -e {shlex.quote(str(path))}"


def _zero_caps(code: int, out: str) -> bool:
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    names = ("CapInh", "CapPrm", "CapEff", "CapAmb")
    return code == 0 and all(int(fields[n].strip(), 16) == 0 for n in names if n in fields)


def host_secrets() -> list[Path]:
    """Host paths an agent must not see: the project, the store, .env files, $HOME's files."""
    store = Path(os.environ.get("MKB_DB") or "mkb-data/mkb.sqlite").resolve()
    paths = [PROJECT_ROOT / "pyproject.toml", PROJECT_ROOT / ".env", Path.cwd() / ".env"]
    if store.exists():
        paths.append(store)
    home = Path.home()
    with contextlib.suppress(OSError):
        # $HOME's own files (a Python installed under $HOME is bound, nothing else of it)
        paths += sorted(p for p in home.iterdir() if p.is_file())[:20]
    return paths


def probes(workdir: str, host_port: int, host_marker: str) -> list[Probe]:
    """The properties of a jail, as shell probes (each must be able to fail)."""
    hidden = " && ".join(_hidden(p) for p in host_secrets())
    return [
        Probe("runs as an unprivileged uid", "id -u", lambda c, o: c == 0 and o.strip() != "0"),
        Probe("no capabilities", "grep ^Cap /proc/self/status", _zero_caps),
        Probe(
            "no_new_privs (setuid binaries cannot escalate)",
            "grep ^NoNewPrivs /proc/self/status",
            lambda c, o: o.split() == ["NoNewPrivs:", "1"],
        ),
        Probe("cannot create user namespaces", "unshare -U true", lambda c, o: c != 0),
        Probe(
            "own PID namespace",
            "cat /proc/1/cmdline | tr '\\0' ' '",
            lambda c, o: c == 0 and o.startswith("bwrap"),
        ),
        Probe(
            "no network but its own loopback",
            "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
            lambda c, o: o.split() == ["lo"],
        ),
        Probe(
            "host loopback services unreachable",
            f"timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{host_port}'",
            lambda c, o: c != 0,
        ),
        Probe(
            "project, store, .env and host home invisible",
            hidden or "true",
            lambda c, o: c == 0,
        ),
        Probe(
            "host environment not inherited",
            "env",
            lambda c, o: c == 0 and host_marker not in o,
        ),
        # access(W_OK) fails on a read-only mount even for root; nothing is written
        Probe("system directories read-only", "test -w /usr || test -w /etc", lambda c, o: c != 0),
        Probe("root directory read-only", "test -w /", lambda c, o: c != 0),
        Probe(
            "workspace writable",
            f"touch {shlex.quote(workdir)}/.mkb-probe && rm {shlex.quote(workdir)}/.mkb-probe",
            lambda c, o: c == 0,
        ),
        Probe(
            "private /tmp",
            f"echo x > /tmp/{host_marker} && cat /tmp/{host_marker}",
            lambda c, o: c == 0 and not Path(f"/tmp/{host_marker}").exists(),
        ),
        Probe(
            "resource limits set",
            "ulimit -u; ulimit -f; ulimit -n",
            lambda c, o: c == 0 and "unlimited" not in o.split(),
        ),
    ]


async def verify_agent_jail(root: Path | None = None) -> list[Check]:
    """Start a throw-away jailed sandbox and check every property; never raises."""
    marker = f"mkb-probe-{uuid.uuid4().hex}"
    with tempfile.TemporaryDirectory(dir=root) as scratch, _listener() as port:
        base = Path(scratch)
        env = _environment(base)
        os.environ[marker] = marker
        try:
            await env.start(force_build=False)
        except Exception as exc:  # noqa: BLE001 - the reason is the report
            os.environ.pop(marker, None)
            return [Check("the jail starts", False, f"{type(exc).__name__}: {exc}")]
        checks = [Check("the jail starts", True)]
        try:
            for probe in probes(env.workdir, port, marker):
                result = await env.exec(probe.command, timeout_sec=PROBE_TIMEOUT_S)
                out = (result.stdout or "") + (result.stderr or "")
                ok = probe.passes(result.return_code, result.stdout or "")
                detail = "" if ok else f"exit {result.return_code}: {out.strip()[:200]}"
                checks.append(Check(probe.name, ok, detail))
        finally:
            os.environ.pop(marker, None)
            await env.stop(delete=True)
    return checks


def _environment(base: Path) -> LocalNamespaceEnvironment:
    env_dir = base / "environment"
    env_dir.mkdir()
    (env_dir / "README.md").write_text("probe\n")
    paths = TrialPaths(base / "trial")
    paths.mkdir()
    return LocalNamespaceEnvironment(
        environment_dir=env_dir,
        environment_name="jail-check",
        session_id=f"jail-check-{os.getpid()}",
        trial_paths=paths,
        task_env_config=TaskEnvironment(workdir="/workspace", network_mode="no-network"),
        root_dir=str(base / "sandboxes"),
    )


@contextlib.contextmanager
def _listener() -> Iterator[int]:
    """A TCP server on the host's 127.0.0.1 (the jail must not reach it); yields its port."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def run_checks(root: Path | None = None) -> list[Check]:
    return asyncio.run(verify_agent_jail(root))
