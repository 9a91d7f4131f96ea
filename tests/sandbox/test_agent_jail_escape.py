"""Escape suite: an agent in the local sandbox tries to leave its jail (real Harbor API).

Canaries are planted on the host (a project tree with a fake store and ``.env``, a ``$HOME``,
an API key in the engine's environment); every probe runs through ``exec`` as the agent's
commands do, and each pairs with a positive control so that it can fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shlex
import socket
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from jail_support import EnvFactory, needs_root_linux

from engine.sandbox.agent_jail import PROJECT_ROOT

pytestmark = needs_root_linux

CANARY = f"mkb-canary-{uuid.uuid4().hex}"
REAL_HOME = Path(pwd.getpwuid(os.getuid()).pw_dir)


@dataclass
class Host:
    project: Path
    store: Path
    dotenv: Path
    home: Path
    secrets: list[Path]


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    """A planted host: project tree (code, .env, store), a $HOME, a key in the environment."""
    project = tmp_path / "project"
    (project / "engine").mkdir(parents=True)
    (project / "mkb-data").mkdir()
    secret_code = project / "engine" / "secret.py"
    secret_code.write_text(f"KEY = '{CANARY}'\n")
    dotenv = project / ".env"
    dotenv.write_text(f"OPENAI_API_KEY={CANARY}\n")
    store = project / "mkb-data" / "mkb.sqlite"
    store.write_bytes(b"SQLite format 3\x00" + CANARY.encode())
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine api password {CANARY}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MKB_DB", str(store))
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    secrets = [secret_code, dotenv, store, home / ".netrc"]
    for path in secrets:  # positive control: the host itself reads them
        assert CANARY.encode() in path.read_bytes()
    return Host(project, store, dotenv, home, secrets)


async def _sh(env, command: str, timeout: int = 60):  # type: ignore[no-untyped-def]
    return await env.exec(command, timeout_sec=timeout)


@pytest.mark.slow
async def test_host_files_cannot_be_read(host: Host, started: EnvFactory) -> None:
    env = await started()
    assert (await _sh(env, "cat /workspace/hello.txt")).stdout == "from the task\n"
    for path in host.secrets:
        r = await _sh(env, f"cat {shlex.quote(str(path))}")
        assert r.return_code != 0 and CANARY not in r.stdout, path
    for folder in (host.project, host.home, host.project.parent):
        r = await _sh(env, f"ls -a {shlex.quote(str(folder))}")
        assert r.return_code != 0, (folder, r.stdout)
    # the real checkout and the real home: nothing but the bound Python installs
    assert (PROJECT_ROOT / "pyproject.toml").is_file()
    r = await _sh(env, f"cat {PROJECT_ROOT}/pyproject.toml; ls -a {PROJECT_ROOT}")
    assert "[project]" not in r.stdout and "pyproject.toml" not in r.stdout
    assert env._jail is not None
    bound = [dst for _, dst in env._jail.spec.ro + env._jail.spec.rw]
    visible = []
    for entry in sorted(REAL_HOME.iterdir())[:50]:
        on_the_way = any(b == str(entry) or b.startswith(f"{entry}/") for b in bound)
        if (
            not on_the_way
            and (await _sh(env, f"test -e {shlex.quote(str(entry))}")).return_code == 0
        ):
            visible.append(entry)
    assert visible == []
    # the engine's environment (API keys) never reaches the jail
    r = await _sh(env, "env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'")
    assert r.return_code == 0 and "PATH=" in r.stdout and CANARY not in r.stdout


async def test_writes_outside_the_workspace_fail_or_stay_private(
    host: Host, started: EnvFactory
) -> None:
    env = await started()
    python_prefix = env._jail.spec.ro[0][1] if env._jail else "/usr"
    refused = [
        host.project / "engine" / "evil.py",
        host.project / "evil.py",
        Path("/evil"),
        Path("/usr/evil"),
        Path("/usr/bin/evil"),
        Path("/etc/evil"),
        Path("/etc/passwd"),
        Path(python_prefix) / "evil",
    ]
    for target in refused:
        r = await _sh(env, f"echo {CANARY} > {shlex.quote(str(target))}")
        assert r.return_code != 0, target
        assert not target.exists() or CANARY not in target.read_text(errors="replace"), target
    mark = f"evil-{uuid.uuid4().hex}"
    for private in (f"/tmp/{mark}", f"/dev/shm/{mark}"):
        r = await _sh(env, f"echo {CANARY} > {private} && cat {private}")
        assert r.stdout.strip() == CANARY  # writable inside…
        assert not Path(private).exists()  # …but invisible to the host
    # positive control: the workspace is writable and shows on the host as the jail uid
    r = await _sh(env, f"echo {CANARY} > /workspace/ok.txt")
    assert r.return_code == 0
    assert env._base is not None
    made = env._base / "work" / "ok.txt"
    assert made.read_text().strip() == CANARY and made.stat().st_uid == 1000


# serial: it reads the sleeper's /proc/PID/cmdline right after Popen returns, which can be
# inside exec (cmdline still empty) when the cores are busy
@pytest.mark.serial
async def test_host_processes_are_invisible(started: EnvFactory) -> None:
    env = await started()
    sleeper = subprocess.Popen(["sleep", "4242"], env={"PATH": os.defpath, "SECRET": CANARY})
    try:
        cmdline = Path(f"/proc/{sleeper.pid}/cmdline")
        for _ in range(100):  # until exec has finished (cmdline is empty before)
            if cmdline.read_bytes():
                break
            await asyncio.sleep(0.02)
        assert cmdline.read_bytes().startswith(b"sleep")
        r = await _sh(env, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")
        assert r.return_code == 0 and r.stdout.startswith("bwrap")  # the jail's own init
        assert "sleep 4242" not in r.stdout
        processes = [line for line in r.stdout.splitlines() if line.strip()]
        assert len(processes) < 10
        environ = await _sh(env, "cat /proc/[0-9]*/environ | tr '\\0' '\\n'")
        assert "PATH=" in environ.stdout and CANARY not in environ.stdout
        await _sh(env, f"kill -9 {sleeper.pid} 2>/dev/null; true")
        assert sleeper.poll() is None  # a host pid cannot be signalled from inside
    finally:
        sleeper.kill()
        sleeper.wait()


PROBE_NET = """
import socket
s = socket.socket(); s.settimeout(3)
try:
    s.connect(("10.255.255.1", 80)); print("tcp-connected")
except OSError as e:
    print("tcp-failed", e.errno)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"x", ("8.8.8.8", 53)); print("udp-sent")
except OSError as e:
    print("udp-failed", e.errno)
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
c = socket.create_connection(srv.getsockname(), timeout=3); print("loopback-ok")
"""


async def test_outside_addresses_are_unreachable(started: EnvFactory) -> None:
    env = await started()
    r = await _sh(env, f"python3 -c {shlex.quote(PROBE_NET)}")
    words = r.stdout.split()
    assert "tcp-failed" in words and "udp-failed" in words, r.stdout + r.stderr
    assert "loopback-ok" in words  # positive control: the jail's own loopback works
    ifaces = await _sh(env, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert ifaces.stdout.split() == ["lo"]
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    host_ifaces = [line.split(":")[0].strip() for line in lines]
    if len(host_ifaces) > 1:  # a public-network task does get the host's interfaces
        public = await started("public", network_mode="public")
        shown = await _sh(public, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
        assert sorted(shown.stdout.split()) == sorted(host_ifaces)


async def test_host_loopback_services_are_unreachable(started: EnvFactory) -> None:
    env = await started()
    tcp = socket.create_server(("127.0.0.1", 0))
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind(f"\0{CANARY}")
    abstract.listen()
    port = tcp.getsockname()[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3):
            pass  # positive control: the host reaches its own server
        probe = (
            "import socket\n"
            f"for addr in [('127.0.0.1', {port}), ('localhost', {port})]:\n"
            "    try:\n"
            "        socket.create_connection(addr, timeout=3); print('reached', addr)\n"
            "    except OSError as e: print('refused', e.errno)\n"
            "u = socket.socket(socket.AF_UNIX)\n"
            "try:\n"
            f"    u.connect('\\0{CANARY}'); print('reached abstract')\n"
            "except OSError as e: print('refused', e.errno)\n"
        )
        r = await _sh(env, f"python3 -c {shlex.quote(probe)}")
        assert r.return_code == 0, r.stderr
        assert "reached" not in r.stdout and r.stdout.count("refused") == 3
        for path in ("/run", "/var/run/docker.sock", "/var"):
            assert (await _sh(env, f"test -e {path}")).return_code != 0, path
    finally:
        tcp.close()
        abstract.close()


async def test_the_agent_cannot_become_root(started: EnvFactory) -> None:
    env = await started()
    r = await _sh(env, "id -u; id -g; grep -E '^(Cap[A-Za-z]+|NoNewPrivs):' /proc/self/status")
    lines = r.stdout.splitlines()
    assert lines[:2] == ["1000", "1000"]
    fields = dict(line.split(":\t") for line in lines[2:])
    for name in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(fields[name], 16) == 0, name
    assert fields["NoNewPrivs"] == "1"
    setuid = await _sh(env, "find /usr/bin /usr/sbin -perm -4000 -type f 2>/dev/null")
    assert "/usr/bin/su" in setuid.stdout.split()  # positive control: setuid binaries exist
    attempts = {
        "su": "su root -c 'id -u' </dev/null",
        "setuid": "python3 -c 'import os; os.setuid(0); print(os.getuid())'",
        "mount": "mount -t tmpfs none /tmp",
        "userns": "unshare -r id -u",
        "chown": "chown 0 /workspace/hello.txt",
    }
    for name, command in attempts.items():
        r = await _sh(env, command, timeout=20)
        assert r.return_code != 0 and r.stdout.strip() != "0", (name, r.stdout, r.stderr)


async def test_another_attempts_workspace_is_unreachable(started: EnvFactory) -> None:
    first = await started("first")
    second = await started("second")
    mark = f"first-{uuid.uuid4().hex}"
    r = await _sh(
        first,
        f"echo {mark} > /workspace/{mark} && echo {mark} > /tmp/{mark} && "
        f"(nohup sleep 4343 >/dev/null 2>&1 &) && cat /workspace/{mark}",
    )
    assert r.stdout.strip() == mark  # positive control: the first attempt sees its own
    assert first._base is not None
    host_copy = first._base / "work" / mark
    assert host_copy.read_text().strip() == mark
    probes = [
        f"cat /workspace/{mark}",
        f"cat /tmp/{mark}",
        f"cat {shlex.quote(str(host_copy))}",
        f"ls {shlex.quote(str(first._base))}",
    ]
    for command in probes:
        r = await _sh(second, command)
        assert r.return_code != 0 and mark not in r.stdout, command
    r = await _sh(second, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    assert "sleep 4343" not in r.stdout


async def test_transfers_never_follow_links_out_of_the_jail(
    host: Host, started: EnvFactory, tmp_path: Path
) -> None:
    env = await started()
    dotenv, engine_dir = shlex.quote(str(host.dotenv)), shlex.quote(str(host.project / "engine"))
    r = await _sh(
        env,
        f"ln -s {dotenv} /workspace/link && mkdir /workspace/d && echo ok > /workspace/d/f && "
        f"ln -s {dotenv} /workspace/d/link && ln -s /etc/hosts /workspace/d/hosts && "
        f"ln -s {engine_dir} /workspace/up",
    )
    assert r.return_code == 0, r.stderr
    got = tmp_path / "got.txt"
    with pytest.raises(FileNotFoundError):
        await env.download_file("/workspace/link", got)
    assert not got.exists()
    await env.download_dir("/workspace/d", tmp_path / "got-dir")
    assert (tmp_path / "got-dir" / "f").read_text() == "ok\n"  # positive control
    for path in (tmp_path / "got-dir").rglob("*"):
        if path.is_file():
            assert CANARY not in path.read_text(errors="replace"), path
    assert not (tmp_path / "got-dir" / "link").exists()
    source = tmp_path / "owned.py"
    source.write_text("pwned = True\n")
    for target in ("/workspace/up/owned.py", "/workspace/link"):
        with contextlib.suppress(OSError):  # refused is fine; writing through the link is not
            await env.upload_file(source, target)
    assert not (host.project / "engine" / "owned.py").exists()
    assert CANARY in host.dotenv.read_text()
    await env.upload_file(source, "/workspace/sub/owned.py")  # positive control
    r = await _sh(env, "cat /workspace/sub/owned.py; stat -c %u /workspace/sub/owned.py")
    assert r.stdout.splitlines() == ["pwned = True", "1000"]


async def test_resource_limits_hold(started: EnvFactory) -> None:
    env = await started(jail_limits={"file_size_mb": 1, "nofile": 256, "nproc": 500})
    r = await _sh(
        env,
        "ulimit -n; ulimit -u; head -c 500000 /dev/zero > small && echo small-ok; "
        "(head -c 3000000 /dev/zero > big) 2>/dev/null; echo big=$?; stat -c %s big",
    )
    lines = r.stdout.splitlines()
    assert lines[:3] == ["256", "500", "small-ok"], r.stderr
    assert lines[3] != "big=0" and int(lines[4]) <= 1024 * 1024


async def test_harbor_log_folders_are_not_shared_with_the_host(
    host: Host, started: EnvFactory
) -> None:
    trial = host.project.parent / "trial-logs"  # as a Harbor Trial passes its log binds
    auto_mounts = [
        {"type": "bind", "source": str(trial / name), "target": f"/logs/{name}"}
        for name in ("agent", "verifier", "artifacts")
    ]
    env = await started("logs", auto_mounts=auto_mounts)
    trial_agent = env.trial_paths.agent_dir
    assert trial_agent == trial / "agent"
    r = await _sh(
        env,
        f"ln -s {shlex.quote(str(host.dotenv))} /logs/agent/trajectory.json && "
        "echo pane > /logs/agent/terminus_2.pane",
    )
    assert r.return_code == 0, r.stderr
    assert not (trial_agent / "trajectory.json").is_symlink()  # nothing shows on the host
    (trial_agent / "trajectory.json").write_text("{}")  # as Terminus-2 writes it, host side
    assert CANARY in host.dotenv.read_text() and "{}" not in host.dotenv.read_text()
    await env.download_dir("/logs/agent", trial_agent)  # as Harbor does after the agent
    assert (trial_agent / "terminus_2.pane").read_text() == "pane\n"  # positive control
    assert not (trial_agent / "trajectory.json").is_symlink()
    assert (trial_agent / "trajectory.json").read_text() == "{}"
