"""The namespace-only sandbox behind ``unsafe_no_jail``: no bubblewrap, no jail user.

A holder process (``sleep``) runs in fresh mount and PID namespaces (and a network namespace
unless the task may use the network) made by ``unshare``; the sandbox's private folders are
bind-mounted over their targets inside it. Commands join the holder's namespaces with
``nsenter`` and run as root (or as the asked user through ``runuser``) with the whole host file
system visible and writable. :class:`engine.sandbox.local_ns.LocalNamespaceEnvironment` uses
this only when asked to run without the agent jail.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from engine.sandbox.agent_jail import await_marker

READY_MARKER = "mkb-sandbox-ready"
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def needed_under_tmp(python_bin: Path) -> list[Path]:
    """The sandbox's Python prefix and the project, where they live under the host's /tmp."""
    candidates = {Path(sys.prefix).resolve(), python_bin.resolve().parent, _PROJECT_ROOT}
    inside = [p for p in candidates if p.is_relative_to("/tmp") and p != Path("/tmp")]
    # a folder inside another candidate is already visible through that one
    return sorted(p for p in inside if not any(p != q and p.is_relative_to(q) for q in inside))


def mount_table(
    base: Path,
    private: Sequence[tuple[str, str]],
    extra_mounts: Sequence[Mapping[str, object]],
    python_bin: Path,
) -> list[tuple[Path, str]]:
    """(host source, sandbox target) pairs, in mount order; /tmp last.

    ``private`` names the sandbox's own folders as (folder under ``base``, target) pairs;
    ``extra_mounts`` are Harbor's mounts (``source``/``target`` mappings), bound as given.
    """
    table: list[tuple[Path, str]] = [(base / name, target) for name, target in private]
    for mount in extra_mounts:
        table.append((Path(str(mount["source"])), str(mount["target"])))
    # host folders under /tmp that the sandbox still needs (its Python, the project) are
    # bound into the private /tmp at their own paths, so the private /tmp hides nothing
    for path in needed_under_tmp(python_bin):
        table.append((path, str(base / "tmp" / path.relative_to("/tmp"))))
    table.append((base / "tmp", "/tmp"))
    return table


def spawn_holder(
    table: Sequence[tuple[Path, str]],
    isolate_network: bool,
    preexec_fn: Callable[[], None] | None,
) -> subprocess.Popen[bytes]:
    """Start the holder: new namespaces, the mounts of ``table``, then ``sleep infinity``."""
    # /tmp is bound recursively so that folders bound inside the private /tmp show through
    mounts = " && ".join(
        f"mount {'--rbind' if dst == '/tmp' else '--bind'} {_q(str(src))} {_q(dst)}"
        for src, dst in table
    )
    script = f"{mounts} && echo {READY_MARKER} && exec sleep infinity"
    argv = ["unshare", "--mount", "--pid", "--fork", "--propagation", "private"]
    if isolate_network:
        argv.append("--net")
    argv += ["--mount-proc", "--", "/bin/sh", "-c", script]
    # A plain Popen (not an asyncio subprocess): the holder outlives many event-loop turns
    # and is reaped by its owner's stop(), whoever else waits on children.
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )


async def holder_init_pid(holder: subprocess.Popen[bytes], timeout_s: float) -> int:
    """Wait until the holder's mounts are up; the pid of its namespaces' init process.

    Raises :class:`RuntimeError` when the namespaces do not come up.
    """
    failure = await await_marker(holder, READY_MARKER, timeout_s)
    if failure is not None:
        raise RuntimeError(f"sandbox namespaces did not come up: {failure.strip()}")
    children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children")
    pids = children.read_text().split()
    if not pids:
        raise RuntimeError("sandbox init process vanished right after start")
    return int(pids[0])


def join_argv(
    init_pid: int, isolate_network: bool, cwd: str, user: str | int | None, command: str
) -> list[str]:
    """Run ``command`` with bash inside the holder's namespaces, in ``cwd``, as ``user``."""
    argv = ["nsenter", "-t", str(init_pid), "-m", "-p"]
    if isolate_network:
        argv.append("-n")
    argv += [f"--wdns={cwd}", "--"]
    if user not in (None, "root", 0, "0"):
        argv += ["runuser", "-u", str(user), "--"]
    return [*argv, "bash", "-c", command]


def _q(text: str) -> str:
    """Single-quote a string for /bin/sh."""
    return "'" + text.replace("'", "'\"'\"'") + "'"
