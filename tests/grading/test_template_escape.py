"""The runner template attacked from its children (engine/grading/runner/template.py).

Each evaluation's runner is forked from one jailed template; these tests are children that
know the source and try to reach the template or the next evaluation: signals to PID 1, its
memory through /proc and ptrace, daemons (one that hops from pid to pid), files in every
writable place, System V and POSIX IPC, memory hidden in a daemon, descriptors and logs, and
modules in a shared place. Each attack runs as module-level code of a submission loaded into
a real template child, with the real jail; what the next child sees is the verdict.
"""

from __future__ import annotations

import json
import mmap
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from engine.grading.judge.runner_proc import (
    RunnerMemory,
    RunnerOptions,
    RunnerProcess,
    _tree_rss_mb,
)
from engine.grading.parent.template import RunnerTemplate
from engine.sandbox.jail import jail_problem

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("runner_template"),
    pytest.mark.skipif(jail_problem() is not None, reason=f"no jail here: {jail_problem()}"),
]

PRELUDE = """
import ctypes, json, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def report(value):
    print("RESULT " + json.dumps(value), flush=True)
def attempt(what):
    try:
        return "ok: " + str(what())[:80]
    except Exception as exc:
        return "denied: " + type(exc).__name__
def solve(*inputs):
    return None
"""


@pytest.fixture(scope="module")
def started() -> Iterator[list[RunnerTemplate]]:
    held: list[RunnerTemplate] = []
    yield held
    for one in held:
        one.close()


@pytest.fixture
def template(started: list[RunnerTemplate]) -> RunnerTemplate:
    """The module's template, or a new one where a failed test ended the last."""
    if not started or not started[-1].alive():
        started.append(RunnerTemplate(RunnerOptions(device="cpu", preload_dsls=False)))
        started[-1].wait_ready()
    return started[-1]


def evaluate(
    template: RunnerTemplate, body: str, leave: bool = False, wait_s: float = 30.0
) -> tuple[RunnerProcess, dict[str, Any], str]:
    """Fork a child, load ``PRELUDE + body`` in it; return it, what it reported, its log.
    ``leave``: close only the child itself (what it started is left to the template)."""
    runner = template.fork()
    runner.wait_ready(60)
    fd = os.memfd_create("attack")
    os.write(fd, (PRELUDE + body).encode())
    os.lseek(fd, 0, 0)
    reply, _ = runner.request({"op": "load"}, time.monotonic() + wait_s, [fd])
    assert reply.get("ok"), reply
    log = runner.log_tail(50_000)
    found = [line for line in log.splitlines() if line.startswith("RESULT ")]
    if leave:
        runner.template_pid = None  # its kill then reaches the child alone
    runner.close()
    return runner, json.loads(found[-1][7:]) if found else {}, log


def test_signals_from_a_child_do_not_reach_the_template_its_pid_1(template) -> None:
    _, seen, _ = evaluate(
        template,
        """
sent = {}
for sig in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGSEGV", "SIGSTOP", "SIGKILL"):
    sent[sig] = attempt(lambda: os.kill(os.getppid(), getattr(signal, sig)))
report({"parent": os.getppid(), "sent": sent})
""",
    )
    assert seen["parent"] == 1
    assert all(v.startswith("ok") for v in seen["sent"].values()), seen  # sent, and ignored
    pid = template.pid
    _, after, _ = evaluate(template, "report({'parent': os.getppid()})")
    assert template.alive() and template.pid == pid and after == {"parent": 1}


def test_a_child_cannot_read_or_trace_the_template(template) -> None:
    _, seen, _ = evaluate(
        template,
        """
def read(path, mode="rb"):
    with open(path, mode) as fh:
        return fh.read(64)
report({
    "environ": attempt(lambda: read("/proc/1/environ")),
    "maps": attempt(lambda: read("/proc/1/maps")),
    "mem": attempt(lambda: read("/proc/1/mem")),
    "mem_write": attempt(lambda: open("/proc/1/mem", "r+b")),
    "fds": attempt(lambda: os.listdir("/proc/1/fd")),
    "cwd": attempt(lambda: os.readlink("/proc/1/cwd")),
    "ptrace": attempt(lambda: (libc.ptrace(16, 1, None, None) == 0) or 1 / 0),
})
""",
    )
    assert seen and all(v.startswith("denied") for v in seen.values()), seen


HOPPER = """
def daemon(body):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, signal.SIG_IGN)
            body()
        os._exit(0)
    time.sleep(0.2)
def hop():  # a daemon that never keeps its pid: a new child each step, the old one exits
    while True:
        if os.fork():
            os._exit(0)
        time.sleep(0.001)
daemon(lambda: time.sleep(3600))
daemon(hop)
report({"others": [p for p in os.listdir("/proc") if p.isdigit()]})
"""


def test_a_fork_kills_every_process_an_earlier_child_left(template) -> None:
    _, before, _ = evaluate(template, HOPPER, leave=True)
    assert len(before["others"]) >= 4, before  # 1, the child, the sleeper, the hopper
    _, seen, _ = evaluate(
        template, "report({'others': [p for p in os.listdir('/proc') if p.isdigit()]})"
    )
    assert sorted(seen["others"], key=int)[0] == "1" and len(seen["others"]) == 2, seen


WRITER = """
import stat
token = "mkb-left-behind"
def places():
    with open("/proc/self/mountinfo") as fh:
        mounts = [row.split()[4] for row in fh if row.split()[5].startswith("rw")]
    found = set()
    for mount in mounts + ["/", "/dev", "/work", "/tmp", "/dev/shm", os.getcwd()]:
        found.add(mount)
        try:
            found.update(os.path.join(mount, n) for n in os.listdir(mount))
        except OSError:
            pass
    return sorted(p for p in found if os.path.isdir(p) and not os.path.islink(p))
written = []
for folder in places():
    path = os.path.join(folder, token)
    try:
        os.makedirs(path + ".d/deep")
        with open(path + ".d/deep/file", "w") as fh:
            fh.write("x")
        os.chmod(path + ".d/deep", 0)
        os.chmod(path + ".d", 0)
        with open(path, "w") as fh:
            fh.write("left by an earlier evaluation")
        written.append(path)
    except OSError:
        continue
for folder in ("/work", "/tmp", "/dev/shm"):
    attempt(lambda: os.chmod(folder, 0))
report({"written": written})
"""


def test_every_writable_place_is_emptied_before_the_next_child(template) -> None:
    _, wrote, _ = evaluate(template, WRITER, leave=True)
    written = wrote["written"]
    assert {"/work/mkb-left-behind", "/tmp/mkb-left-behind"} <= set(written), wrote
    _, seen, _ = evaluate(
        template,
        f"""
left = [p for p in {written!r} if os.path.lexists(p) or os.path.lexists(p + ".d")]
report({{"left": left, "usable": [os.access(d, os.W_OK | os.X_OK) for d in ("/work", "/tmp")]}})
""",
    )
    assert seen == {"left": [], "usable": [True, True]}, seen


IPC = """
IPC_CREAT, KEY = 0o1000, 0x6D6B62
report({
    "shm": libc.shmget(KEY, 4096, IPC_CREAT | 0o600),
    "sem": libc.semget(KEY, 1, IPC_CREAT | 0o600),
    "msg": libc.msgget(KEY, IPC_CREAT | 0o600),
    "mq": ctypes.CDLL("librt.so.1", use_errno=True).mq_open(b"/mkb-left", 0o102, 0o600, None),
})
"""


def test_system_v_and_posix_ipc_do_not_outlive_a_child(template) -> None:
    _, made, _ = evaluate(template, IPC, leave=True)
    assert made["shm"] >= 0 and made["sem"] >= 0 and made["msg"] >= 0, made  # created
    assert made["mq"] == -1, made  # RLIMIT_MSGQUEUE 0: no POSIX queue to leave
    _, seen, _ = evaluate(
        template,
        """
KEY = 0x6D6B62
rows = {k: open(f"/proc/sysvipc/{k}").read().splitlines()[1:] for k in ("shm", "sem", "msg")}
mq = ctypes.CDLL("librt.so.1", use_errno=True).mq_open(b"/mkb-left", 0, 0, None)
report({"rows": rows, "shm": libc.shmget(KEY, 0, 0), "mq": mq})
""",
    )
    assert seen == {"rows": {"shm": [], "sem": [], "msg": []}, "shm": -1, "mq": -1}, seen


def test_the_watchdog_counts_a_daemon_reparented_to_the_template(template) -> None:
    """A child hides memory in a daemon that the template (PID 1) inherits: the watchdog
    sums the template's whole tree less the template, so the child is still killed."""
    runner = template.fork()
    try:
        runner.wait_ready(60)
        assert template.pid is not None
        alone = runner.tree_rss_mb()
        assert _tree_rss_mb(template.pid) - alone > 50  # the template (torch) is not counted
        # above the child and a transient copy of it (the daemon's parent), below a daemon
        # that holds 400 MB more
        runner.memory_limit_mb = 2 * alone + 150
        fd = os.memfd_create("attack")
        body = HOPPER.split("daemon(lambda")[0] + (
            'daemon(lambda: (bytearray(b"x") * (400 << 20), time.sleep(60)))\ntime.sleep(8)\n'
        )
        os.write(fd, (PRELUDE + body).encode())
        os.lseek(fd, 0, 0)
        with pytest.raises(RunnerMemory):
            runner.request({"op": "load"}, time.monotonic() + 15, [fd])
    finally:
        runner.close()


def test_a_child_holds_only_its_own_descriptors_and_log(template) -> None:
    body = """
print("written by evaluation {n}", flush=True)
fds = {{fd: attempt(lambda: os.readlink(f"/proc/self/fd/{{fd}}"))
       for fd in os.listdir("/proc/self/fd")}}
report({{"fds": fds}})
"""
    first, seen, first_log = evaluate(template, body.format(n="one"))
    second, again, second_log = evaluate(template, body.format(n="two"))
    assert "evaluation one" in first_log and "evaluation one" not in second_log
    for runner, fds in ((first, seen["fds"]), (second, again["fds"])):
        # stdin, the log twice, the runner socket, the bypass page and listdir's own
        assert len(fds) == 6, fds
        assert fds["0"] == "ok: /dev/null", fds
        assert fds["1"] == fds["2"] == f"ok: {runner.scratch}/runner.log", fds
        assert sum(v.startswith("ok: socket:") for v in fds.values()) == 1, fds
        assert sum("memfd:mkb-bypass" in v for v in fds.values()) == 1, fds
    assert first.scratch != second.scratch


def test_a_child_cannot_change_what_the_next_one_imports(template) -> None:
    _, wrote, _ = evaluate(
        template,
        """
import loop
loop.Runner.serve = None
os.environ["MKB_PLANTED"] = "1"
planted = []
for folder in [*sys.path, os.getcwd()]:
    for path in (os.path.join(folder, "mkb_planted.py"),
                 os.path.join(folder, "__pycache__", "loop.cpython-312.pyc")):
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write("PLANTED = True\\n")
            planted.append(os.path.abspath(path))
        except OSError:
            pass
report({"planted": planted})
""",
        leave=True,
    )
    assert all(p.startswith("/work/") for p in wrote["planted"]), wrote  # only the workdir
    _, seen, _ = evaluate(
        template,
        """
import loop
report({
    "import": attempt(lambda: __import__("mkb_planted").PLANTED),
    "env": os.environ.get("MKB_PLANTED"),
    "serve": callable(loop.Runner.serve),
})
""",
    )
    assert seen == {"import": "denied: ModuleNotFoundError", "env": None, "serve": True}, seen


KEYS = """
libc.syscall.restype = ctypes.c_long
KEYCTL = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
ADD_KEY = {"x86_64": 248, "aarch64": 217}[os.uname().machine]
persistent = libc.syscall(KEYCTL, 22, -1, -2)  # the user's persistent key ring, linked here
rings = {"session": -3, "user": -4, "user_session": -5, "persistent": persistent}
"""


def test_no_key_ring_carries_a_key_to_the_next_child(template) -> None:
    _, made, _ = evaluate(
        template,
        KEYS
        + """
report({n: libc.syscall(ADD_KEY, b"user", b"mkb-" + n.encode(), b"left", 4, r)
        for n, r in rings.items() if r > 0 or r < -2})
""",
        leave=True,
    )
    assert made and all(serial > 0 for serial in made.values()), made
    _, seen, _ = evaluate(
        template,
        KEYS
        + """
report({n: libc.syscall(KEYCTL, 10, r, b"user", b"mkb-" + n.encode(), 0)
        for n, r in rings.items() if r > 0 or r < -2})
""",
    )
    assert seen.keys() == made.keys() and set(seen.values()) == {-1}, seen


def test_a_child_inherits_no_memory_shared_with_the_template(template) -> None:
    """Every page a child inherits is copied on write, but a shared writable mapping would
    carry what one child wrote to the template and the next child: the template has none
    (it refuses to start with one), and a child's own are its bypass page alone."""
    with open(f"/proc/{template.pid}/maps") as fh:
        rows = [row.split() for row in fh]
    assert not [row for row in rows if row[1][1] == "w" and row[1][3] == "s"], rows
    _, seen, _ = evaluate(
        template,
        """
rows = [row.split() for row in open("/proc/self/maps")]
report([" ".join(row[5:]) for row in rows if row[1][1] == "w" and row[1][3] == "s"])
""",
    )
    assert seen == ["/memfd:mkb-bypass (deleted)"], seen


def test_a_child_that_dies_before_ready_is_replaced_by_a_fresh_runner(template) -> None:
    """On a GPU a child starts CUDA itself; if that fails the judge falls back to a fresh
    runner (the grader's trouble, never the submission's)."""
    from engine.grading.judge.judge import started_or_fresh

    options = RunnerOptions(device="cpu", preload_dsls=False)
    healthy = template.fork()
    assert started_or_fresh(healthy, options) is healthy
    healthy.close()
    # a child that died before its "ready": its socket's other end closed, its pid a zombie
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    theirs.close()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    dying = RunnerProcess(ours, pid, mmap.mmap(-1, mmap.PAGESIZE))
    dying.template_pid = template.pid
    fresh = started_or_fresh(dying, options)
    try:
        assert fresh is not dying and fresh.template_pid is None
        assert fresh.wait_ready(120)["op"] == "ready"
    finally:
        fresh.close()
