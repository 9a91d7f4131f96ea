"""The agent's Python inside the jail: the host venv, or a prepared per-DSL venv layered on it,
runs with its packages while the project checkout stays out."""

from __future__ import annotations

import shlex
from pathlib import Path

from jail_support import EnvFactory, needs_root_linux

from engine.sandbox import venvs
from engine.sandbox.agent_jail import PROJECT_ROOT

pytestmark = needs_root_linux

PROBE = (
    "import sys, aiohttp\n"
    "print(sys.prefix)\n"
    "try:\n"
    "    import engine.sandbox.jail\n"
    "    print('project-importable')\n"
    "except ImportError:\n"
    "    print('project-hidden')\n"
)


async def test_the_host_venv_runs_without_the_project(started: EnvFactory) -> None:
    env = await started()
    r = await env.exec(f"python3 -c {shlex.quote(PROBE)}; ls {PROJECT_ROOT}")
    lines = r.stdout.splitlines()
    assert lines[1] == "project-hidden", r.stderr
    assert lines[2:] == [".venv"] or lines[2:] == []  # at most the venv's own folder


async def test_a_prepared_dsl_venv_runs_in_the_jail(tmp_path: Path, started: EnvFactory) -> None:
    bin_dir = venvs.prepare("tirx", tmp_path / "venvs", requirements=())
    env = await started(python_bin=str(bin_dir))
    r = await env.exec(f"which python3; python3 -c {shlex.quote(PROBE)}")
    lines = r.stdout.splitlines()
    assert lines[0] == str(bin_dir / "python3"), r.stderr  # first on PATH
    assert lines[1] == str((tmp_path / "venvs" / "tirx").resolve())
    assert lines[2] == "project-hidden"  # the host venv's packages come, the project does not
