"""The runner template: one jailed process that imports torch and the DSLs once and forks a
fresh runner per evaluation inside its jail (the slot's warm parent drives it, see
:mod:`engine.grading.parent.template`). A file of the runner's zone: standard library only
until the preload, copied into the jail beside :mod:`loop`.

It holds its trust points itself, and refuses to serve without them:

* it is the jail's PID 1 (bubblewrap ``--as-pid-1``) with no signal handler of its own
  (Python's SIGINT handler is removed), so no signal from inside the jail reaches it;
* it is not dumpable (``PR_SET_DUMPABLE`` 0): no child can ptrace it, read its memory,
  environment, maps or descriptors through ``/proc``;
* before every fork it kills every other process of the jail (``kill(-1, SIGKILL)``: atomic
  against a forking child), reaps them, checks none is left, and empties every writable place
  (its workdir, ``/tmp``, ``/dev/shm``, System V shared memory, semaphores and message
  queues, key rings); POSIX message queues, which it could not list, cannot be created
  (``RLIMIT_MSGQUEUE`` 0). Anything it cannot empty ends it: the warm parent starts a new jail;
* it empties the kernel's key rings that outlive a process (user, user-session, session,
  persistent);
* it holds no writable shared mapping (a child would share it with the next);
* it never runs submission code: a child gets its socket, bypass page and log from the
  message that asked for it, closes every other descriptor and runs :class:`loop.Runner`.

Protocol on its control socket (``SOCK_SEQPACKET``, JSON, descriptors as ``SCM_RIGHTS``):
out ``ready``; in ``fork`` + (runner socket, bypass memfd, log) → out ``forked`` (the
child's pid in the jail) or ``error``; end of input → exits (the jail dies with it).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import importlib
import mmap
import os
import resource
import signal
import socket
import stat
import sys
from collections.abc import Iterator
from typing import Any

if __package__:
    from engine.grading.runner.channel import receive, send
else:  # run as a script in the jail: its zone's other files lie beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from channel import receive, send  # type: ignore[import-not-found,no-redef]

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
IPC_RMID = 0
SCRATCH = ("/tmp", "/dev/shm")  # emptied before every fork, beside the workdir
SYSV = ("shm", "sem", "msg")
# the kernel's key rings a process reaches without a name: session, user, user-session (all
# three outlive a process; the user's two are shared by every process of the jail's uid)
KEYRINGS = (-3, -4, -5)
KEYCTL = {"x86_64": 250, "aarch64": 219}  # the keyctl system call's number
KEYCTL_CLEAR, KEYCTL_GET_PERSISTENT, KEY_SPEC_PROCESS_KEYRING = 7, 22, -2


class TemplateError(RuntimeError):
    """A trust point cannot be held: the template stops (a new jail replaces it)."""


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def set_dumpable(value: int) -> None:
    libc = _libc()
    if libc.prctl(PR_SET_DUMPABLE, value, 0, 0, 0) != 0:
        raise TemplateError(f"prctl(PR_SET_DUMPABLE) failed: errno {ctypes.get_errno()}")


def others() -> list[int]:
    """The jail's processes other than this one (its PID 1)."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]


def shared_writable_maps() -> list[str]:
    """Writable shared mappings of this process: a child would inherit each, and what one
    child wrote there the template and every later child would read."""
    with open("/proc/self/maps") as fh:
        rows = [row.split() for row in fh]
    return [" ".join(row) for row in rows if row[1][1] == "w" and row[1][3] == "s"]


def kill_all() -> None:
    """Kill every other process of the jail, reap them all, and check that none is left."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    left = others()
    if left:
        raise TemplateError(f"processes survived kill(-1): {left}")


def mount_points() -> set[str]:
    """Where something is mounted in this jail (read once: no process in it can mount)."""
    with open("/proc/self/mountinfo") as fh:
        return {line.split()[4].replace("\\040", " ") for line in fh}


def _is_dir(path: str) -> bool:
    return stat.S_ISDIR(os.lstat(path).st_mode)  # a link is not followed


def _remove(path: str) -> None:
    """Remove ``path`` and all it holds, unlocking each folder first (a child may have
    taken its own permissions away); no link followed. Too deep a tree raises (OSError):
    the template then ends and its jail with it."""
    if not _is_dir(path):
        os.unlink(path)
        return
    stack = [path]
    while stack:
        top = stack[-1]
        os.chmod(top, stat.S_IRWXU)
        folders = []
        for name in os.listdir(top):
            inner = os.path.join(top, name)
            if _is_dir(inner):
                folders.append(inner)
            else:
                os.unlink(inner)
        if folders:
            stack.extend(folders)
        else:
            os.rmdir(top)
            stack.pop()


def empty(root: str, mode: int, mounts: set[str]) -> None:
    """Remove everything under ``root`` but the mount points in it (and the folders that
    lead to them, emptied around them), and give ``root`` back ``mode``."""
    os.chmod(root, mode)
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if path in mounts:
            continue
        if any(m.startswith(path + "/") for m in mounts):
            empty(path, 0o755, mounts)
            continue
        _remove(path)
    kept = {os.path.join(root, n) for n in os.listdir(root)}
    if any(not (p in mounts or any(m.startswith(p + "/") for m in mounts)) for p in kept):
        raise TemplateError(f"{root} could not be emptied")


def sysv_ids(kind: str) -> list[int]:
    """The ids of this IPC namespace's System V objects of ``kind`` (shm, sem, msg)."""
    with open(f"/proc/sysvipc/{kind}") as fh:
        rows = fh.read().splitlines()[1:]
    return [int(row.split()[1]) for row in rows if row.strip()]


def remove_sysv() -> None:
    libc = _libc()
    remove = {
        "shm": lambda i: libc.shmctl(i, IPC_RMID, None),
        "sem": lambda i: libc.semctl(i, 0, IPC_RMID),
        "msg": lambda i: libc.msgctl(i, IPC_RMID, None),
    }
    for kind in SYSV:
        for ident in sysv_ids(kind):
            remove[kind](ident)
        if sysv_ids(kind):
            raise TemplateError(f"System V {kind} objects survived IPC_RMID")


def clear_keyrings() -> None:
    """Empty the key rings a child could leave keys in (and the user's persistent one)."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    number = KEYCTL.get(os.uname().machine)
    if number is None:
        raise TemplateError(f"no keyctl system call number known for {os.uname().machine}")
    persistent = libc.syscall(number, KEYCTL_GET_PERSISTENT, -1, KEY_SPEC_PROCESS_KEYRING)
    for ring in [*KEYRINGS, *([persistent] if persistent > 0 else [])]:
        if libc.syscall(number, KEYCTL_CLEAR, ring) != 0:
            raise TemplateError(f"key ring {ring} not cleared: errno {ctypes.get_errno()}")


def scrub(places: dict[str, int], mounts: set[str]) -> None:
    """Nothing of an earlier child left: no process, no file, no IPC object."""
    kill_all()
    for root, mode in places.items():
        empty(root, mode, mounts)
    remove_sysv()
    clear_keyrings()


def child(ctl: socket.socket, fds: list[int], device: str, workdir: str) -> None:
    """In the forked child: take this evaluation's descriptors, drop the rest, serve."""
    code = 0
    try:
        sock_fd, flag_fd, log_fd = fds
        os.setsid()
        ctl.close()
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        keep = sorted({0, 1, 2, sock_fd, flag_fd})
        for low, high in zip(keep, [*keep[1:], 1 << 20], strict=True):
            os.closerange(low + 1, high)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh runner
        gc.enable()  # the template's objects stay frozen: no collection copies their pages
        set_dumpable(1)  # the child is an ordinary runner; the template stays undumpable
        os.chdir(workdir)
        flag = mmap.mmap(flag_fd, mmap.PAGESIZE)
        os.close(flag_fd)
        loop = sys.modules["loop"] if "loop" in sys.modules else importlib.import_module("loop")
        with contextlib.suppress(EOFError):
            loop.Runner(socket.socket(fileno=sock_fd), device, flag).serve()
    except BaseException:  # noqa: BLE001 - never return into the template's loop
        code = 70
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(ctl: socket.socket, device: str, places: dict[str, int], workdir: str) -> None:
    mounts = mount_points()
    while True:
        try:
            message, fds = receive(ctl)
        except EOFError:
            return
        if message.get("op") != "fork" or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            send(ctl, {"op": "error", "error": f"unexpected {message.get('op')!r}"})
            continue
        scrub(places, mounts)  # raises: the template ends, the warm parent starts a new jail
        pid = os.fork()
        if pid == 0:
            child(ctl, fds, device, workdir)
        for fd in fds:
            os.close(fd)
        send(ctl, {"op": "forked", "pid": pid})


@contextlib.contextmanager
def device_probe_answered(torch: Any, device: str) -> Iterator[None]:
    """While the DSLs import in a GPU template, ``torch.cuda.is_available()`` answers True
    without asking NVML or the driver. tvm_ffi asks at import; answered for real, NVML was
    opened in the template, and its children (which close every descriptor they did not
    get) saw no device: every H100 grading of 2026-12-07 ended at the runner's first
    synchronize with ``invalid argument to exchangeDevice``. True is what a fresh runner on
    that host is told."""
    if device != "cuda":
        yield
        return
    real = torch.cuda.is_available
    torch.cuda.is_available = lambda: True
    try:
        yield
    finally:
        torch.cuda.is_available = real


def driver_files(fd_dir: str = "/proc/self/fd", prefix: str = "/dev/nvidia") -> list[str]:
    """The template's descriptors open on a GPU device file: NVML or the CUDA driver was
    initialised here, which no forked child could use."""
    found = []
    for name in os.listdir(fd_dir):
        with contextlib.suppress(OSError):
            target = os.readlink(os.path.join(fd_dir, name))
            if target.startswith(prefix):
                found.append(target)
    return found


def preload(modules: str, paths: list[str], device: str = "cpu") -> list[str]:
    """Import torch and the modules named (optional DSLs) without touching a GPU."""
    sys.path[0:0] = [os.path.dirname(os.path.abspath(__file__)), *paths]
    import torch

    loaded = []
    with device_probe_answered(torch, device):
        for name in filter(None, modules.split(",")):
            try:
                importlib.import_module(name)
                loaded.append(name)
            except Exception:  # noqa: BLE001 - optional DSLs
                continue
        importlib.import_module("loop")
    if torch.cuda.is_initialized():
        raise TemplateError("CUDA was initialised in the template: its children could not")
    opened = driver_files()
    if opened:
        raise TemplateError(f"a GPU device was opened in the template: {opened[:3]}")
    return loaded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="template.py")
    parser.add_argument("--ctl-fd", type=int, required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--preload", default="")
    parser.add_argument("--path", action="append", default=[])
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # no handler: PID 1 then ignores it
    gc.disable()  # until the imports are frozen (a forking server's recipe: no page of the
    # template's objects is written by a child's collection, nor walked by it)
    ctl = socket.socket(fileno=args.ctl_fd)
    if os.getpid() != 1:
        send(ctl, {"op": "error", "error": "the template is not the jail's PID 1"})
        return 2
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
    loaded = preload(args.preload, args.path, args.device)
    gc.freeze()
    set_dumpable(0)
    if _libc().prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise TemplateError("the template is still dumpable")
    if shared_writable_maps():
        raise TemplateError(f"writable shared memory in the template: {shared_writable_maps()}")
    places = {args.workdir: stat.S_IMODE(os.stat(args.workdir).st_mode)}
    places.update({p: stat.S_IMODE(os.stat(p).st_mode) for p in SCRATCH if os.path.isdir(p)})
    send(ctl, {"op": "ready", "preloaded": loaded})
    serve(ctl, args.device, places, args.workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
