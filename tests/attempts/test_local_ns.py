"""The namespace sandbox: isolation, file transfer, limits, cleanup, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from attempts_support import needs_namespaces
from harbor.models.task.config import EnvironmentConfig as TaskEnvironment
from harbor.models.trial.paths import TrialPaths

from engine.sandbox import local_ns
from engine.sandbox.local_ns import (
    LocalNamespaceEnvironment,
    SandboxStartError,
    SandboxUnavailableError,
)


def _env(tmp_path: Path, **kwargs) -> LocalNamespaceEnvironment:
    env_dir = tmp_path / "environment"
    env_dir.mkdir(exist_ok=True)
    (env_dir / "hello.txt").write_text("from the task\n")
    (env_dir / "Dockerfile").write_text("FROM scratch\n")
    paths = TrialPaths(tmp_path / "trial")
    paths.mkdir()
    return LocalNamespaceEnvironment(
        environment_dir=env_dir,
        environment_name="t",
        session_id=f"test-{os.getpid()}-{tmp_path.name}__env",
        trial_paths=paths,
        task_env_config=TaskEnvironment(
            workdir="/workspace", network_mode="no-network", cpus=1, memory_mb=512
        ),
        root_dir=str(tmp_path / "sandboxes"),
        **kwargs,
    )


@pytest.mark.slow
@needs_namespaces
@pytest.mark.parametrize("unsafe", [False, True], ids=["jail", "unsafe-no-jail"])
async def test_isolation_transfer_and_cleanup(tmp_path: Path, unsafe: bool) -> None:
    env = _env(tmp_path, unsafe_no_jail=unsafe)
    await env.start(force_build=False)
    try:
        r = await env.exec(
            "pwd; cat hello.txt; ls Dockerfile 2>&1; echo $HOME; echo ${OPENAI_API_KEY:-none}; "
            "id -u"
        )
        out = r.stdout.splitlines()
        assert out[0] == "/workspace" and out[1] == "from the task"
        assert "No such file" in out[2]  # the Dockerfile is not copied into the workdir
        assert out[3] == local_ns.SANDBOX_HOME and out[4] == "none"
        assert out[5] == ("0" if unsafe else "1000")  # the jail runs as an unprivileged uid

        net = await env.exec("tail -n +3 /proc/net/dev | cut -d: -f1; ip -o link show lo")
        names = net.stdout.splitlines()[:-1]
        assert [n.strip() for n in names] == ["lo"]  # no interface but the loopback…
        # …down in the namespace-only sandbox, up (and private) in the jail
        assert ("state DOWN" if unsafe else "LOOPBACK,UP") in net.stdout.splitlines()[-1]

        await env.exec("echo private > /tmp/mine.txt")
        assert not Path("/tmp/mine.txt").exists()  # /tmp is private
        pid1 = await env.exec("cat /proc/1/cmdline | tr '\\0' ' '")
        # own PID namespace: its PID 1 is the holder (or the jail's bwrap init)
        assert pid1.stdout.startswith("sleep" if unsafe else "bwrap")

        src = tmp_path / "up.txt"
        src.write_text("uploaded")
        await env.upload_file(src, "/workspace/sub/up.txt")
        assert (await env.exec("cat sub/up.txt")).stdout == "uploaded"
        await env.exec("mkdir -p /mkb/box && echo x > /mkb/box/a && echo y > /mkb/box/b")
        await env.download_dir("/mkb/box", tmp_path / "box")
        assert sorted(p.name for p in (tmp_path / "box").iterdir()) == ["a", "b"]
        await env.exec("echo agent-log > /logs/agent/note.txt")
        if not unsafe:  # jailed, Harbor's logs are private to the jail and downloaded
            assert not env.capabilities.mounted
            await env.download_dir("/logs/agent", tmp_path / "trial" / "agent")
        assert (tmp_path / "trial" / "agent" / "note.txt").read_text() == "agent-log\n"

        slow = await env.exec("sleep 5", timeout_sec=1)
        assert slow.return_code == 124

        # many jailed processes: the kernel kills a namespace's processes one by one
        # a duration no other test sleeps for: the check below scans the whole host's /proc
        await env.exec("for i in $(seq 100); do nohup sleep 317 >/dev/null 2>&1 & done")
        init = env.init_pid
        cgroups = list(env._cgroup.dirs) if env._cgroup else []
    finally:
        await env.stop(delete=True)
    assert not [d for d in cgroups if d.exists()]  # the per-sandbox cgroups are removed
    # stop returns once the namespace's init has exited, which the kernel allows only after
    # every other process of the namespace has: none is left, right away
    assert _state(init) in ("gone", "Z")
    leftovers = [
        p for p in Path("/proc").iterdir() if p.name.isdigit() and b"sleep\x00317" in _cmdline(p)
    ]
    assert leftovers == []
    assert not any((tmp_path / "sandboxes" / "mkb-sandboxes").iterdir())


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


@needs_namespaces
async def test_memory_limit_applies_where_cgroups_allow(tmp_path: Path) -> None:
    env = _env(tmp_path)
    await env.start(force_build=False)
    try:
        limits = env._cgroup
        assert limits is not None
        if "memory" not in limits.applied:
            pytest.skip(f"cgroups not writable here: {limits.problems}")
        host_view = Path(f"/proc/{env.init_pid}/cgroup").read_text()
        assert f"/mkb-{limits.name}" in host_view  # the jail lives in the sandbox's cgroup…
        r = await env.exec("cat /proc/self/cgroup")
        assert r.return_code == 0 and "mkb-" not in r.stdout  # …seen as its cgroup ns root
        if "pids" in limits.applied:
            assert any((d / "pids.max").is_file() for d in limits.dirs)
        hog = await env.exec(
            "python3 -c \"b = bytearray(900 * 1024 * 1024); print('allocated')\"", timeout_sec=60
        )
        assert "allocated" not in hog.stdout  # 900 MB does not fit in 512 MB
    finally:
        await env.stop(delete=True)


@needs_namespaces
async def test_a_bad_mount_fails_start_with_a_reason(tmp_path: Path) -> None:
    env = _env(tmp_path, private_dirs=["/proc/sys/mkb-cannot-exist"])
    with pytest.raises((SandboxStartError, OSError)):
        await env.start(force_build=False)
    await env.stop(delete=True)


async def test_unavailable_namespaces_give_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_ns.os, "geteuid", lambda: 1000)
    assert "root" in (local_ns.namespace_support_problem() or "")
    env = _env(tmp_path)
    with pytest.raises(SandboxUnavailableError, match="--environment docker"):
        await env.start(force_build=False)


def test_mkb_sandbox_check_reports_the_host(capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import main as mkb

    code = mkb(["sandbox", "check", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"namespaces", "tmux", "limits_applied", "dsl_packages", "jail"}
    jail_ok = all(v == "pass" for v in report["jail"].values())
    host_ok = report["namespaces"] == "ok" and not report["tmux"].startswith("missing")
    assert code == (0 if host_ok and jail_ok else 1)
    assert (report["namespaces"] == "ok") == (local_ns.namespace_support_problem() is None)


def test_prepare_builds_a_venv_that_sees_the_host_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import main as mkb
    from engine.attempts.runner import environment_kwargs
    from engine.attempts.spec import AttemptSpec, ModelSpec
    from engine.sandbox import venvs

    assert mkb(["sandbox", "prepare", "--dsl", "tirx", "--root", str(tmp_path), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "apache-tvm==0.27.0.post1" in plan and "-m venv" in plan
    assert venvs.venv_bin("tirx", tmp_path) is None  # a dry run builds nothing

    bin_dir = venvs.prepare("tirx", tmp_path, requirements=())
    assert venvs.venv_bin("tirx", tmp_path) == bin_dir.resolve()
    probe = subprocess.run(
        [str(bin_dir / "python"), "-c", "import sys, aiohttp; print(sys.prefix)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == str((tmp_path / "tirx").resolve())

    monkeypatch.setenv("MKB_SANDBOX_VENVS", str(tmp_path))
    spec = AttemptSpec("x", "p28", "tirx", ModelSpec("openai/x"), tmp_path)
    assert environment_kwargs(spec)["python_bin"] == str(bin_dir.resolve())
    cute = AttemptSpec("y", "p28", "cute", ModelSpec("openai/x"), tmp_path)
    assert "python_bin" not in environment_kwargs(cute)  # no cute venv: the host venv is used
