"""The judge's handle on one runner process: start it (jailed), talk to it, time it, kill it.

A submission runner is a fresh ``python -I loop.py`` started from a directory holding only
the files of :mod:`engine.grading.runner` (``RUNNER_FILES``), inside a bubblewrap jail
(:mod:`engine.sandbox.jail`): its own workdir, the Python with torch and the DSLs read-only,
the GPU device nodes, no network, no project tree, store or keys, an unprivileged uid. If the
jail cannot be built the grading fails closed, unless the operator chose ``unsafe_no_jail``.

The eager reference runs in a *reference runner* forked from the judge before the judge
touches CUDA: the same loop and timing code, trusted code only, so both sides of the speedup
pay the same path.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.grading.judge import placement
from engine.grading.processes import SECRET_MARKERS, read_tail
from engine.grading.runner.channel import SPIN_S, spin_until_readable
from engine.grading.runner.compiled import COMPILE_DIR

RUNNER_DIR = Path(__file__).resolve().parents[1] / "runner"
# exactly the files of the runner's zone: copied into the jail, nothing else of ours goes there
RUNNER_FILES = tuple(sorted(p.name for p in RUNNER_DIR.glob("*.py") if p.name != "__init__.py"))
RUNNER_MAIN = "loop.py"
DSL_PRELOAD = "cutlass,cutlass.cute,tvm,tvm_ffi"
DSL_MODULES = {"cute": "cutlass,cutlass.cute", "tirx": "tvm,tvm_ffi"}
JAIL_WORKDIR = "/work"
JAIL_RUNNER_DIR = "/mkb-runner"
READY_TIMEOUT_S = 300.0


class RunnerDied(Exception):
    """The runner exited or closed its socket."""


class RunnerTimeout(Exception):
    """The runner did not answer before the deadline."""


class RunnerMemory(Exception):
    """The runner went over its memory limit and was killed."""


@dataclass
class RunnerOptions:
    device: str  # "cpu" or "cuda"
    preload_dsls: bool = True
    # the job's DSL when the runner is started for a known job (only its modules are
    # preloaded: the launch hooks watch that DSL alone); None for a spare (both)
    dsl: str | None = None
    jail: bool = True  # False only with an explicit --unsafe-no-jail
    memory_limit_mb: int | None = None  # host RSS watchdog
    python: str = sys.executable
    env: dict[str, str] | None = None
    # extra import directories (read-only in the jail), e.g. a stand-in DSL for tests;
    # from $MKB_RUNNER_PATHS (colon-separated) by default
    paths: list[str] = field(
        default_factory=lambda: [p for p in os.environ.get("MKB_RUNNER_PATHS", "").split(":") if p]
    )


def _resolve_reference(message: dict[str, Any]) -> Callable[..., Any]:
    """In a trusted reference runner: the reference function of the problem named."""
    from problems.registry import get, load_problem

    path = message.get("problem_path")
    problem = load_problem(Path(path)) if path else get(str(message.get("problem_id")))
    return problem.reference  # type: ignore[no-any-return]


def preload_modules(options: RunnerOptions) -> str:
    """The modules a runner imports before it says ready (comma-separated; may be empty)."""
    if not options.preload_dsls:
        return ""
    return DSL_MODULES.get(options.dsl or "", DSL_PRELOAD)


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (a jailed runner is bubblewrap's grandchild)."""
    stack: list[int] = [pid]
    seen: list[int] = []
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as fh:
                    stack.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return seen


def _tree_rss_mb(pid: int, exclude: int | None = None) -> float:
    """Resident memory of ``pid`` and all its descendants (less ``exclude``)."""
    total = 0.0
    for process in process_tree(pid):
        if process == exclude:
            continue
        try:
            with open(f"/proc/{process}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) / 1024
                        break
        except (OSError, ValueError):
            continue
    return total


class RunnerProcess:
    """One runner: its socket, its bypass page, its pid; requests with deadlines."""

    def __init__(
        self,
        sock: socket.socket,
        pid: int,
        switch: mmap.mmap,
        popen: Any = None,
        device: str = "cpu",
    ):
        self.sock = sock
        self.pid = pid
        self.switch = switch
        self.popen = popen
        self.memory_limit_mb: float | None = None
        self.scratch: str | None = None
        self.workdir: str | None = None  # its work folder on the host (DSL caches write there)
        self.ready: dict[str, Any] = {}
        # a child of a runner template (parent/template.py): the template's host pid. Its
        # watchdog and kill cover the template's whole tree less the template, where a
        # daemon the child started lands once reparented to the jail's PID 1
        self.template_pid: int | None = None
        # busy polling before a wait sleeps (GPU only: see runner.SPIN_S)
        self.spin_s = SPIN_S if device == "cuda" else 0.0

    # -- starting ---------------------------------------------------------------------------
    @classmethod
    def spawn(cls, options: RunnerOptions, main: Path | None = None) -> RunnerProcess:
        """Start a fresh submission runner (jailed unless told otherwise); not yet ready.
        ``main``: a script run in ``loop.py``'s place, copied beside the runner's files (the
        layer benchmark, ``benchmarks/timed_path_layers.py``; never a grading)."""
        judge_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        switch_fd = os.memfd_create("mkb-bypass")
        os.ftruncate(switch_fd, mmap.PAGESIZE)
        switch = mmap.mmap(switch_fd, mmap.PAGESIZE)
        scratch = runner_scratch(main)
        script = main.name if main else RUNNER_MAIN
        args = ["--sock-fd", str(runner_end.fileno()), "--flag-fd", str(switch_fd)]
        keep = [runner_end.fileno(), switch_fd]
        argv, cwd, env = jailed_command(
            options, scratch, script, args + zone_args(options), keep,
            extra=(main.name,) if main else (),
        )
        popen = start_zone_process(argv, cwd, env, keep, Path(scratch) / "runner.log")
        runner_end.close()
        os.close(switch_fd)
        proc = cls(judge_end, popen.pid, switch, popen, options.device)
        proc.scratch = scratch
        proc.workdir = str(Path(scratch) / "work")
        proc.memory_limit_mb = options.memory_limit_mb
        return proc

    @classmethod
    def fork_reference(cls, device: str, reference: Callable[..., Any] | None) -> RunnerProcess:
        """Fork a trusted runner whose solve is ``reference`` (call before touching CUDA).

        With ``reference=None`` the runner is started ahead of its job: a ``reference``
        message naming the problem (``problem_id`` or ``problem_path``) arms it later."""
        judge_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        switch = mmap.mmap(-1, mmap.PAGESIZE)
        pid = os.fork()
        if pid == 0:  # the reference runner
            code = 0
            try:
                judge_end.close()
                from engine.grading.runner.loop import Runner
                from problems.compare import reference_numerics

                runner = Runner(
                    runner_end,
                    device,
                    None,
                    armed=reference,
                    resolver=_resolve_reference if reference is None else None,
                )
                with reference_numerics():  # this process only ever runs the reference
                    runner.serve()
            except EOFError:
                pass
            except BaseException:  # noqa: BLE001
                code = 70
            finally:
                os._exit(code)
        runner_end.close()
        return cls(judge_end, pid, switch, device=device)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        if self.ready:
            return self.ready
        reply, _ = self.receive(time.monotonic() + timeout_s)
        if reply.get("op") != "ready":
            raise RunnerDied(f"runner sent {str(reply)[:100]} instead of ready")
        self.ready = reply
        return reply

    # -- talking ----------------------------------------------------------------------------
    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        from engine.grading.runner.channel import send

        try:
            send(self.sock, message, fds)
        except OSError as exc:
            raise RunnerDied(f"runner socket closed: {exc}") from exc

    def receive(self, deadline: float) -> tuple[dict[str, Any], list[int]]:
        """The next message, waiting until ``deadline`` (monotonic) with a memory watchdog.
        On a GPU it first polls busily for ``spin_s`` (a short call's answer then wakes no
        sleeping process), then sleeps in ``select``."""
        if self.spin_s:
            spin_until_readable(self.sock, max(0.0, min(self.spin_s, deadline - time.monotonic())))
        next_rss = 0.0
        while True:
            now = time.monotonic()
            if now > deadline:
                raise RunnerTimeout("the runner did not answer in time")
            ready, _, _ = select.select([self.sock], [], [], min(0.05, deadline - now))
            if ready:
                break
            if self.memory_limit_mb and now >= next_rss:
                next_rss = now + 0.2
                if self.tree_rss_mb() > self.memory_limit_mb:
                    self.kill()
                    raise RunnerMemory("the runner exceeded its memory limit")
            if self.exited():
                raise RunnerDied("the runner exited")
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.sock, 1 << 20, 8)
        except OSError as exc:
            raise RunnerDied(f"runner socket error: {exc}") from exc
        if not data:
            raise RunnerDied("the runner closed its socket")
        try:
            message = json.loads(data)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            for fd in fds:
                os.close(fd)
            return {"op": "malformed"}, []
        return message, list(fds)

    def request(
        self, message: dict[str, Any], deadline: float, fds: list[int] | None = None
    ) -> tuple[dict[str, Any], list[int]]:
        """Send ``message`` and wait for the answer (and the descriptors it carries)."""
        self.send(message, fds)
        return self.receive(deadline)

    def timed(
        self, message: dict[str, Any], deadline: float, fds: list[int] | None = None
    ) -> tuple[dict[str, Any], list[int], float]:
        """Like :meth:`request`, with the judge's clock (ms) from release to completion."""
        clock = time.perf_counter
        start = clock()
        reply, got = self.request(message, deadline, fds)
        return reply, got, (clock() - start) * 1e3

    def tree(self) -> list[int]:
        """Its processes: its own tree, or its template's less the template."""
        if self.template_pid is not None:
            return process_tree(self.template_pid)[1:]
        return process_tree(self.pid)

    def tree_rss_mb(self) -> float:
        """What the watchdog counts: this runner's tree, or its template's less the template."""
        if self.template_pid is not None:
            return _tree_rss_mb(self.template_pid, exclude=self.template_pid)
        return _tree_rss_mb(self.pid)

    def log_tail(self, chars: int = 4000) -> str:
        """The end of what the runner printed (untrusted text; the caller labels it)."""
        if not self.scratch:
            return ""
        return read_tail(Path(self.scratch) / "runner.log", chars)

    # -- ending -----------------------------------------------------------------------------
    def exited(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is not None
        try:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return not _alive(self.pid)
        return done != 0

    def kill(self) -> None:
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(self.pid, signal.SIGKILL)
        if self.template_pid is not None:  # what the child left behind (the template's next
            for pid in process_tree(self.template_pid)[1:]:  # fork kills it atomically)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        self.kill()
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=5)
        else:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
        with contextlib.suppress(Exception):
            self.switch.close()
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


def zone_args(options: RunnerOptions) -> list[str]:
    """The arguments every runner-zone process takes: its device, preloads and paths."""
    args = ["--device", options.device]
    if preload_modules(options):
        args += ["--preload", preload_modules(options)]
    for path in options.paths:
        args += ["--path", path]
    return args


def start_zone_process(
    argv: list[str], cwd: str, env: dict[str, str], keep: list[int], log_path: Path
) -> subprocess.Popen[bytes]:
    """Start a runner-zone process (a runner or a runner template) in its own session, on
    the slot's runner CPUs where the slot is placed (judge/placement.py), its output to
    ``log_path``."""
    share = placement.from_env()
    with (
        open(log_path, "wb") as log,
        placement.spawning_on(share.runner if share is not None else None),
    ):
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=keep,
            start_new_session=True,
            cwd=cwd,
            env=env,
        )


def runner_scratch(extra: Path | None = None) -> str:
    """A fresh folder holding the runner zone's files (and ``extra``) and an empty ``work/``."""
    scratch = tempfile.mkdtemp(prefix="mkb-runner-")
    for source in [RUNNER_DIR / name for name in RUNNER_FILES] + ([extra] if extra else []):
        shutil.copyfile(source, Path(scratch) / source.name)
    (Path(scratch) / "work").mkdir()
    return scratch


def jailed_command(
    options: RunnerOptions,
    scratch: str,
    main: str,
    args: list[str],
    keep: list[int],
    template: bool = False,
    extra: tuple[str, ...] = (),
) -> tuple[list[str], str, dict[str, str]]:
    """The command line, cwd and environment of a runner-zone script ``main`` started from
    ``scratch`` (which holds the zone's files and ``work/``), jailed unless told otherwise.
    ``template``: the jail of a runner template (its PID 1; /dev read-only but /dev/shm);
    ``extra``: more files of ``scratch`` to bind beside the zone's."""
    workdir = Path(scratch) / "work"
    env = {**runner_env(options), **dsl_cache_env(options, str(workdir))}
    if not options.jail:
        return [options.python, "-I", str(Path(scratch) / main), *args], str(workdir), env
    from engine.sandbox import jail

    os.chmod(scratch, 0o755)
    spec = jail.JailSpec(
        ro=[(p, p) for p in jail.python_mounts(options.python, exclude=[str(_repo())])]
        + [(scratch + "/" + n, f"{JAIL_RUNNER_DIR}/{n}") for n in (*RUNNER_FILES, *extra)]
        + [(path, path) for path in options.paths],
        rw=[(str(workdir), JAIL_WORKDIR)],
        devices=jail.gpu_device_nodes() if options.device == "cuda" else [],
        network=False,
        chdir=JAIL_WORKDIR,
        env=env,
        keep_fds=keep,
        as_pid_1=template,
        dev_readonly=template,
    )
    if os.geteuid() == 0:  # the jailed uid must be able to write its workdir
        os.chown(workdir, spec.uid, spec.gid)
    argv = jail.jail_argv(spec, [options.python, "-I", f"{JAIL_RUNNER_DIR}/{main}", *args])
    return argv, "/", env


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _repo() -> Path:
    return RUNNER_DIR.parents[2]


def dsl_cache_env(options: RunnerOptions, workdir: str) -> dict[str, str]:
    """The DSLs' on-disk caches in this evaluation's own workdir (judge/compile_cache.py),
    never a folder another evaluation's runner shares (unjailed, /tmp is the host's)."""
    base = JAIL_WORKDIR if options.jail else workdir
    return {"CUTE_DSL_CACHE_DIR": os.path.join(base, COMPILE_DIR, "cute")}


def runner_env(options: RunnerOptions) -> dict[str, str]:
    """A minimal environment: no keys, no PYTHONPATH, the GPU pinning and CUDA paths only."""
    keep = (
        "CUDA_VISIBLE_DEVICES",
        "CUDA_PATH",
        "CUDA_HOME",
        "LD_LIBRARY_PATH",
        "LANG",
        "MKB_PROFILER",  # dsl_hooks.PROFILER (A/B runs)
        "MKB_PROFILER_START",  # loop.PROFILER_START (A/B runs)
    )
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(options.env or {})
    env.update(
        PATH="/usr/local/bin:/usr/bin:/bin",
        HOME=JAIL_WORKDIR if options.jail else tempfile.gettempdir(),
        PYTHONDONTWRITEBYTECODE="1",
        PYTORCH_NVML_BASED_CUDA_CHECK="1",
        PYTORCH_CUDA_ALLOC_CONF="expandable_segments:False",
        OMP_NUM_THREADS="1",
    )
    return {k: v for k, v in env.items() if not any(m in k.upper() for m in SECRET_MARKERS)}
