"""The jail library (engine/sandbox/jail.py): command lines, availability, real jails."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jail_support import needs_root_linux

from engine.sandbox import jail
from engine.sandbox.jail import (
    JailSpec,
    JailUnavailableError,
    Limits,
    check_jail,
    gpu_device_nodes,
    jail_argv,
    join_argv,
    python_mounts,
)

REPO = Path(__file__).resolve().parents[2]


def _run(spec: JailSpec, script: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        jail_argv(spec, ["/bin/bash", "-c", script]),
        capture_output=True,
        text=True,
        timeout=60,
        **kwargs,
    )


def _after(argv: list[str], word: str) -> list[str]:
    return argv[argv.index(word) :]


def _binds(argv: list[str]) -> list[tuple[str, str, str]]:
    bwrap = _after(argv, "bwrap")
    return [
        (bwrap[i], bwrap[i + 1], bwrap[i + 2])
        for i in range(len(bwrap) - 2)
        if bwrap[i] in ("--ro-bind", "--bind", "--dev-bind")
    ]


# -- command lines (no jail started) ------------------------------------------------------------
@needs_root_linux
def test_every_jail_has_the_listed_properties() -> None:
    argv = jail_argv(JailSpec(env={"HOME": "/home/agent"}), ["id"])
    assert argv[-2:] == ["--", "id"]
    assert argv[:3] == ["env", "-i", f"PATH={jail.DEFAULT_PATH}"]  # bwrap's own env is empty
    switch = _after(argv, "setpriv")
    for flag in ("--reuid=1000", "--regid=1000", "--clear-groups", "--no-new-privs"):
        assert flag in switch[: switch.index("bwrap")]
    bwrap = _after(argv, "bwrap")
    for flag in (
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ):
        assert flag in bwrap
    assert bwrap[bwrap.index("--cap-drop") + 1] == "ALL"
    assert "--share-net" not in bwrap  # no network by default
    assert bwrap[bwrap.index("--remount-ro") :][:2] == ["--remount-ro", "/"]
    assert bwrap[bwrap.index("--proc") :][:2] == ["--proc", "/proc"]
    assert bwrap[bwrap.index("--dev") :][:2] == ["--dev", "/dev"]
    inside = {dst for _, _, dst in _binds(argv)}
    assert "/usr" in inside and "/etc/ld.so.cache" in inside and "/etc/passwd" in inside
    # nothing of /etc outside the allow-list; no home, no project, no whole /etc
    for dst in inside - {"/usr"}:
        assert dst.startswith("/etc/"), dst
        name = dst.removeprefix("/etc/")
        assert name in jail.ETC_ALLOWED or name in ("passwd", "group", "hosts"), name
    for secret in ("/etc/shadow", "/etc/pip.conf", "/etc/resolv.conf", "/etc", "/root"):
        assert secret not in inside
    assert ("--ro-bind", "/etc/passwd", "/etc/passwd") not in _binds(argv)  # generated instead


@needs_root_linux
def test_network_adds_the_resolver_and_keeps_the_host_network() -> None:
    argv = jail_argv(JailSpec(network=True), ["true"])
    assert "--share-net" in argv
    if Path("/etc/resolv.conf").exists():
        assert "/etc/resolv.conf" in {dst for _, _, dst in _binds(argv)}


def test_a_jail_never_runs_as_root() -> None:
    with pytest.raises(ValueError, match="uid or gid 0"):
        jail_argv(JailSpec(uid=0), ["true"])
    with pytest.raises(ValueError, match="uid or gid 0"):
        jail_argv(JailSpec(gid=0), ["true"])
    with pytest.raises(ValueError, match="absolute"):
        jail_argv(JailSpec(rw=[("/tmp", "relative")]), ["true"])


def test_without_root_the_uid_cannot_switch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(jail.os, "geteuid", lambda: 1234)
    with pytest.raises(JailUnavailableError, match="uid switch not permitted"):
        jail_argv(JailSpec(uid=1000), ["true"])
    monkeypatch.setattr(jail, "_runtime_dir", lambda: tmp_path)
    argv = jail_argv(JailSpec(uid=1234, gid=1234), ["true"])
    assert argv[0] != "setpriv" and "setpriv" not in argv and "bwrap" in argv
    with pytest.raises(JailUnavailableError, match="needs root"):
        join_argv(JailSpec(uid=1234, gid=1234), 1, ["true"])


def test_check_jail_names_the_missing_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = jail.shutil.which
    monkeypatch.setattr(
        jail.shutil, "which", lambda tool: None if tool == "bwrap" else real_which(tool)
    )
    with pytest.raises(JailUnavailableError, match="bubblewrap is not installed"):
        check_jail()
    monkeypatch.setattr(jail.shutil, "which", real_which)
    monkeypatch.setattr(jail, "_sysctl", lambda name: "0" if "max_user" in name else None)
    with pytest.raises(JailUnavailableError, match="user namespaces are disabled"):
        check_jail()
    monkeypatch.setattr(jail, "_sysctl", lambda name: None)
    monkeypatch.setattr(jail.os, "geteuid", lambda: 4321)
    monkeypatch.setattr(jail.sys, "platform", "linux")
    jail._probe.cache_clear()
    try:
        with pytest.raises(JailUnavailableError, match="uid switch not permitted"):
            check_jail(1000)
    finally:
        jail._probe.cache_clear()


@needs_root_linux
def test_a_probe_failure_is_reported_with_bwraps_message(monkeypatch: pytest.MonkeyPatch) -> None:
    real = jail.jail_argv
    monkeypatch.setattr(
        jail, "jail_argv", lambda spec, argv: [*real(spec, argv)[:-2], "--bogus-option", "true"]
    )
    jail._probe.cache_clear()
    try:
        with pytest.raises(JailUnavailableError, match="bwrap could not start a jail"):
            check_jail()
    finally:
        jail._probe.cache_clear()
    monkeypatch.undo()
    check_jail()  # the real thing works here


# -- real jails ---------------------------------------------------------------------------------
@needs_root_linux
def test_a_jail_runs_unprivileged_and_sees_only_its_binds(tmp_path: Path) -> None:
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    (ro / "f.txt").write_text("read me\n")
    os.chown(rw, 1000, 1000)
    spec = JailSpec(ro=[(str(ro), "/data")], rw=[(str(rw), "/out")], env={"MARK": "only"})
    done = _run(
        spec,
        "id -u; cat /data/f.txt; touch /out/new && echo rw-ok; touch /data/x || echo ro-refused;"
        f" ls {tmp_path} 2>&1 || echo host-hidden; env | sort",
    )
    lines = done.stdout.splitlines()
    assert lines[:4] == ["1000", "read me", "rw-ok", "ro-refused"], done.stderr
    assert lines[4] == "host-hidden" or "No such file" in lines[4]
    assert (rw / "new").stat().st_uid == 1000  # created as the unprivileged host uid
    env_names = {line.split("=", 1)[0] for line in lines if "=" in line}
    assert env_names <= {"MARK", "PATH", "PWD", "SHLVL", "_"} and "MARK=only" in lines
    assert not (ro / "x").exists()


@needs_root_linux
def test_the_jails_init_does_not_keep_the_callers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MKB_SECRET_PROBE", "leaked-key")
    done = _run(JailSpec(), "tr '\\0' '\\n' < /proc/1/environ; tr '\\0' ' ' < /proc/1/cmdline")
    assert done.returncode == 0 and "bwrap" in done.stdout  # PID 1 is bwrap, readable…
    assert "leaked-key" not in done.stdout  # …but it holds none of the caller's variables


@needs_root_linux
def test_a_source_the_jail_uid_cannot_reach_is_staged(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    (locked / "inner").mkdir(parents=True)
    locked.chmod(0o700)  # uid 1000 cannot pass through it
    (locked / "inner" / "f.txt").write_text("staged\n")
    spec = JailSpec(ro=[(str(locked / "inner"), "/inner")])
    argv = jail_argv(spec, ["cat", "/inner/f.txt"])
    assert argv[3] == "unshare"  # bound as root first, into a private staging tmpfs
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.stdout == "staged\n", done.stderr
    assert "unshare" not in jail_argv(JailSpec(ro=[("/usr/share", "/share")]), ["true"])[:4]


@needs_root_linux
def test_no_network_unless_asked() -> None:
    script = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort"
    closed = _run(JailSpec(), script)
    assert closed.stdout.split() == ["lo"], closed.stderr
    host = sorted(
        line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:]
    )
    assert _run(JailSpec(network=True), script).stdout.split() == host  # the flag works


@needs_root_linux
def test_limits_and_tmpfs_size_apply(tmp_path: Path) -> None:
    spec = JailSpec(limits=Limits(nofile=128, file_size_mb=1, nproc=300), tmpfs_size_mb=4)
    done = _run(
        spec,
        "ulimit -n; ulimit -u; head -c 500000 /dev/zero > /tmp/small && echo small-ok; "
        "(head -c 3000000 /dev/zero > /tmp/big) 2>/dev/null; echo big=$?; "
        "df -k /tmp | tail -1 | awk '{print $2}'",
    )
    lines = done.stdout.splitlines()
    assert lines[:3] == ["128", "300", "small-ok"], done.stderr
    assert lines[3] != "big=0"  # over the file size limit
    assert int(lines[4]) == 4096  # a 4 MiB tmpfs


@needs_root_linux
def test_kept_file_descriptors_reach_the_jail() -> None:
    read, write = os.pipe()
    spec = JailSpec(keep_fds=[write])
    proc = subprocess.Popen(
        jail_argv(spec, ["/bin/bash", "-c", f"echo through-fd >&{write}"]), pass_fds=[write]
    )
    os.close(write)
    assert proc.wait(timeout=60) == 0
    with os.fdopen(read) as fh:
        assert fh.read() == "through-fd\n"


@needs_root_linux
def test_the_jail_dies_with_its_parent() -> None:
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess\n"
            "from engine.sandbox.jail import JailSpec, jail_argv\n"
            "p = subprocess.Popen(jail_argv(JailSpec(), ['sleep', '7777']))\n"
            "print(p.pid, flush=True)\n"
            "p.wait()\n",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    int(parent.stdout.readline())
    assert _wait_for(lambda: _sleepers("7777"))  # the jailed command runs…
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    assert _wait_for(lambda: not _sleepers("7777"))  # …and dies with the parent


@needs_root_linux
def test_a_joined_command_ends_with_the_same_restrictions() -> None:
    spec = JailSpec(limits=Limits(nofile=200))
    holder = subprocess.Popen(
        jail_argv(spec, ["/bin/sh", "-c", "touch /tmp/holder-mark; echo ready; exec sleep 300"]),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        init = _children(holder.pid)[0]
        pid = _children(init)[0]
        script = (
            "id -u; id -G; ls /tmp; ulimit -n; grep -E '^(CapInh|CapPrm|CapEff|CapAmb|"
            "NoNewPrivs)' /proc/self/status; unshare -U true 2>/dev/null; echo userns=$?"
        )
        done = subprocess.run(
            join_argv(spec, pid, ["/bin/sh", "-c", script]),
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin"},
        )
        lines = done.stdout.splitlines()
        assert lines[:4] == ["1000", "1000", "holder-mark", "200"], done.stderr
        caps = dict(line.split(":") for line in lines[4:9])
        assert all(int(caps[k], 16) == 0 for k in ("CapInh", "CapPrm", "CapEff", "CapAmb"))
        assert caps["NoNewPrivs"].strip() == "1"
        assert lines[-1] != "userns=0"
    finally:
        holder.kill()
        holder.wait()


# -- Python and GPU helpers ---------------------------------------------------------------------
def test_python_mounts_bring_the_interpreter_but_not_the_project() -> None:
    mounts = python_mounts(sys.executable, [str(REPO), str(Path.home())])
    assert os.path.realpath(sys.base_prefix) in mounts
    assert os.path.realpath(sys.prefix) in mounts or any(
        os.path.realpath(sys.prefix).startswith(m + "/") for m in mounts
    )
    for m in mounts:  # nothing of the project but the interpreter's own install
        assert not (m == str(REPO) or str(REPO).startswith(m + "/")), m
        if m.startswith(str(REPO) + "/"):
            assert m.startswith(os.path.realpath(sys.prefix))
    if sys.prefix != sys.base_prefix and str(REPO) in sys.path:  # an editable install
        assert str(REPO) not in mounts


def test_python_mounts_refuse_an_excluded_path_inside_a_needed_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inside = os.path.join(os.path.realpath(sys.base_prefix), "lib")
    with pytest.raises(JailUnavailableError, match="contains the excluded"):
        python_mounts(sys.executable, [inside])
    calls: list[object] = []
    monkeypatch.setattr(jail.subprocess, "run", lambda *a, **k: calls.append(a))
    python_mounts(sys.executable, [])  # asked once, cached
    assert calls == []


def test_gpu_device_nodes_lists_character_devices_only(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    (tmp_path / "nvidia-caps").mkdir()
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap1"):
        os.mknod(tmp_path / name, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    (tmp_path / "nvidia-notes.txt").write_text("not a device")
    (tmp_path / "sda").touch()
    found = gpu_device_nodes(tmp_path)
    assert found == sorted(
        str(tmp_path / n) for n in ("nvidia-caps/nvidia-cap1", "nvidia-uvm", "nvidia0", "nvidiactl")
    )
    assert gpu_device_nodes(tmp_path / "missing") == []


# -- helpers ------------------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _sleepers(arg: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "cmdline").read_bytes() == f"sleep\0{arg}\0".encode():
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def _wait_for(predicate, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
