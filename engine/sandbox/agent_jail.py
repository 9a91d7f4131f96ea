"""The agent jail of the local sandbox: one long-lived bubblewrap jail per attempt.

A holder process (``sleep``) runs in a jail built by :mod:`engine.sandbox.jail`; every
``exec`` joins its namespaces with :func:`engine.sandbox.jail.join_argv`, so all processes of
an attempt share one file system view (workspace, private ``/tmp`` for tmux's socket, HOME)
and end with the same restrictions. Files move through jailed ``tar``/``cat`` processes, never
by host paths: a symlink the agent plants can only point inside its own jail.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from engine.sandbox.jail import JailSpec, Limits, jail_argv, join_argv, python_mounts

AGENT_UID = 1000
AGENT_GID = 1000
HOLDER_READY = "mkb-jail-ready"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def host_exclusions() -> list[str]:
    """Host paths the agent's Python may not bring in: the project, $HOME and the store."""
    store = Path(os.environ.get("MKB_DB") or "mkb-data/mkb.sqlite").resolve().parent
    return [str(PROJECT_ROOT), str(Path.home()), str(store)]


def python_binds(python_bin: Path) -> list[str]:
    """Read-only binds for the Python in ``python_bin`` (its installs, never the project)."""
    mounts: list[str] = []
    for name in ("python3", "python"):
        if (python_bin / name).exists():
            mounts = python_mounts(str(python_bin / name), host_exclusions())
            break
    folder = str(python_bin.resolve())
    if not any(folder == m or folder.startswith(m.rstrip("/") + "/") for m in mounts):
        mounts.append(str(python_bin))
    return mounts


def agent_limits(memory_mb: int | None, cgroup_memory: bool, **overrides: int | None) -> Limits:
    """The jail's limits; without a memory cgroup, the address space stands in for memory."""
    address_space = None if cgroup_memory or not memory_mb else memory_mb
    values: dict[str, int | None] = {
        "address_space_mb": address_space,
        "nproc": 2048,
        "file_size_mb": 8192,
        "cpu_s": 6 * 3600,
        "nofile": 8192,
    }
    values.update(overrides)
    return Limits(**values)


def chown_tree(path: Path, uid: int, gid: int) -> None:
    """Give a host folder (not following symlinks) to the jail user."""
    os.lchown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, gid)


async def await_marker(
    holder: subprocess.Popen[bytes], marker: str, timeout_s: float
) -> str | None:
    """Wait for ``holder`` to print ``marker`` on its first line. None when it did; else
    the holder is killed and its stderr (the reason it did not come up) is returned."""
    assert holder.stdout is not None
    try:
        line = await asyncio.wait_for(asyncio.to_thread(holder.stdout.readline), timeout_s)
    except TimeoutError:
        line = b""
    if line.decode().strip() == marker:
        return None
    holder.kill()
    err = b""
    with contextlib.suppress(Exception):
        _, err = await asyncio.to_thread(holder.communicate, None, 5)
    return err.decode(errors="replace")


class AgentJail:
    """The holder process of one attempt's jail, and command lines that join it."""

    def __init__(self, spec: JailSpec) -> None:
        self.spec = spec
        self.holder: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None  # host pid of a process inside the jail (the holder)
        self.init_pid: int | None = None  # host pid of the jail's PID 1

    async def start(self, preexec: Callable[[], None] | None, timeout_s: float) -> None:
        """Start the holder; raise RuntimeError with bwrap's message if it does not come up."""
        argv = jail_argv(self.spec, ["/bin/sh", "-c", f"echo {HOLDER_READY}; exec sleep infinity"])
        self.holder = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=self.spec.keep_fds,
            preexec_fn=preexec,
        )
        failure = await await_marker(self.holder, HOLDER_READY, timeout_s)
        if failure is not None:
            raise RuntimeError(f"the agent jail did not start: {failure}")
        self.init_pid = _only_child(self.holder.pid)
        self.pid = _only_child(self.init_pid)

    def join(self, argv: list[str], cwd: str | None = None) -> list[str]:
        if self.pid is None:
            raise RuntimeError("the agent jail is not running")
        return join_argv(self.spec, self.pid, argv, cwd)

    async def stop(self) -> None:
        """Kill the jail's PID 1 (and with it every jailed process), then the holder; return
        once every jailed process has exited."""
        init_pid = self.init_pid
        if init_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(init_pid, signal.SIGKILL)
        holder = self.holder
        if holder is not None:
            with contextlib.suppress(ProcessLookupError):
                holder.kill()
            with contextlib.suppress(Exception):
                await asyncio.to_thread(holder.wait, 10)
            for stream in (holder.stdout, holder.stderr):
                if stream is not None:
                    stream.close()
        if init_pid is not None:
            await namespace_gone(init_pid)
        self.holder = self.pid = self.init_pid = None

    # -- file transfer by jailed processes ----------------------------------------------------
    async def run(
        self, argv: list[str], stdin: int | None = None, stdout: int | None = None
    ) -> tuple[int, bytes, bytes]:
        """Run ``argv`` in the jail (stdin/stdout: file descriptors or pipes)."""
        proc = await asyncio.create_subprocess_exec(
            *self.join(argv, "/"),
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=stdout if stdout is not None else subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
            start_new_session=True,
        )
        out, err = await proc.communicate()
        return await proc.wait(), out or b"", err or b""

    async def upload(self, source: Path, target: str) -> None:
        """Copy a host file or folder to ``target`` in the jail (owned by the jail user)."""
        with tempfile.TemporaryFile() as archive:
            with tarfile.open(fileobj=archive, mode="w") as tar:
                if source.is_dir():
                    for child in sorted(source.iterdir()):
                        tar.add(child, arcname=child.name)
                    where = target
                else:
                    tar.add(source, arcname=os.path.basename(target.rstrip("/")))
                    where = os.path.dirname(target.rstrip("/")) or "/"
            archive.seek(0)
            script = 'mkdir -p -- "$1" && exec tar -x -f - -C "$1" --no-same-owner'
            code, _, err = await self.run(
                ["/bin/sh", "-c", script, "upload", where], stdin=archive.fileno()
            )
        if code != 0:
            raise OSError(f"upload to {target} failed: {err.decode(errors='replace').strip()}")

    async def download_file(self, source: str, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            code, _, err = await self.run(["cat", "--", source], stdout=out.fileno())
        if code != 0:
            target.unlink(missing_ok=True)
            raise FileNotFoundError(f"{source}: {err.decode(errors='replace').strip()}")

    async def download_dir(self, source: str, target: Path) -> None:
        """Copy a jail folder to the host (tarfile's ``data`` filter; links that leave it are
        skipped)."""
        with tempfile.TemporaryFile() as archive:
            code, _, err = await self.run(
                ["tar", "-c", "-f", "-", "-C", source, "."], stdout=archive.fileno()
            )
            if code != 0:
                raise FileNotFoundError(f"{source}: {err.decode(errors='replace').strip()}")
            archive.seek(0)
            target.mkdir(parents=True, exist_ok=True)
            with tarfile.open(fileobj=archive, mode="r") as tar:
                await asyncio.to_thread(tar.extractall, target, filter=_inside_only)


def _inside_only(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter, skipping (not failing on) links that leave ``dest``."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


def _only_child(pid: int) -> int:
    """The child of ``pid`` (bwrap → the jail's PID 1 → the holder command)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    if not children:
        raise RuntimeError(f"the agent jail's process {pid} has no child")
    return int(children[0])


async def namespace_gone(init_pid: int, timeout_s: float = 5.0) -> bool:
    """Wait until a killed PID namespace's init has exited: the kernel lets it exit only
    after every other process of its namespace has (so none is left, reparented, dying)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{init_pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        await asyncio.sleep(0.02)
    return False
