"""A grading fleet: many ``mkb grader serve`` hosts behind one client pool.

- :class:`FleetBackend` is the ``http`` client pool with one addition: a host that just failed
  (refused the connection, dropped it, answered 5xx/429) cools down before it gets traffic
  again, doubling per consecutive failure up to ``max_cooldown_s``. Without it a dead host,
  having nothing in flight, looks like the least busy one and attracts every request. A
  request that already failed on a host (the engine retries a grading with the same request
  id) goes to the other hosts first, however long ago that was: a cooldown that expired
  between two tries of one grading must not spend its retries on the same dead host.
- :class:`FleetMonitor` polls each host's ``/status`` and reduces the answers to queue depth,
  busy slots and utilisation (busy slots / slots over the hosts that answer), the figures the
  scheduler reports while a run is going.
- :class:`LocalFleet` starts N grading services as child processes on 127.0.0.1 (tests,
  benchmarks, trying the http backend on one machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
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

from engine.grading.api import Feedback, GradeRequest
from engine.grading.backends.http_client import HttpBackend

REPO_ROOT = Path(__file__).resolve().parents[3]
MAX_REMEMBERED_REQUESTS = 10_000  # requests whose failed hosts the pool remembers


class FleetBackend(HttpBackend):
    """The http client pool, steering around hosts that failed recently."""

    name = "http"

    def __init__(
        self, *args: Any, cooldown_s: float = 2.0, max_cooldown_s: float = 60.0, **options: Any
    ) -> None:
        """``HttpBackend``'s arguments, and how long a failed host is passed over (doubling
        from ``cooldown_s`` up to ``max_cooldown_s``)."""
        super().__init__(*args, **options)
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self.last_failure: dict[str, float] = {}
        # request id -> hosts that failed it (kept until it is answered; bounded below)
        self.failed_for: dict[str, set[str]] = {}

    def cooling(self, url: str, now: float | None = None) -> bool:
        """Whether ``url`` failed recently enough to be tried only as a last resort."""
        failures = self.failures[url]
        if failures == 0 or url not in self.last_failure:
            return False
        wait = min(self.cooldown_s * 2 ** (failures - 1), self.max_cooldown_s)
        return (now if now is not None else time.monotonic()) - self.last_failure[url] < wait

    def order(self, request: GradeRequest | None = None) -> list[str]:
        now = time.monotonic()
        failed = self.failed_for.get(request.request_id, set()) if request else set()
        return sorted(  # stable: among equals, the base order (least busy, rotating)
            super().order(request), key=lambda url: (url in failed, self.cooling(url, now))
        )

    async def _post(self, url: str, request: GradeRequest) -> tuple[Feedback | None, str | None]:
        try:
            feedback, transient = await super()._post(url, request)
        except BaseException:
            self._failed(url, request)
            raise
        if transient is not None:
            self._failed(url, request)
        else:
            self.failed_for.pop(request.request_id, None)
        return feedback, transient

    def _failed(self, url: str, request: GradeRequest) -> None:
        self.last_failure[url] = time.monotonic()
        if request.request_id:
            if len(self.failed_for) >= MAX_REMEMBERED_REQUESTS:
                self.failed_for.pop(next(iter(self.failed_for)))  # the oldest
            self.failed_for.setdefault(request.request_id, set()).add(url)


@dataclass(frozen=True)
class FleetSnapshot:
    """One poll of every host."""

    at: float
    hosts: int
    up: int
    slots: int
    busy: int
    queued: int
    completed: int
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def utilisation(self) -> float:
        """Busy slots over the slots of the hosts that answered (0 when none did)."""
        return self.busy / self.slots if self.slots else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "hosts": self.hosts,
            "up": self.up,
            "slots": self.slots,
            "busy": self.busy,
            "queued": self.queued,
            "completed": self.completed,
            "utilisation": round(self.utilisation, 3),
            "errors": dict(self.errors),
        }


def summarise(statuses: dict[str, Any], at: float | None = None) -> FleetSnapshot:
    """Reduce ``{url: /status answer or {"error": ...}}`` to one :class:`FleetSnapshot`."""
    up = slots = busy = queued = completed = 0
    errors: dict[str, str] = {}
    for url, status in statuses.items():
        if not isinstance(status, dict) or "error" in status:
            errors[url] = str(status.get("error") if isinstance(status, dict) else status)
            continue
        up += 1
        slots += len(status.get("slots") or ())
        busy += int(status.get("busy") or 0)
        queued += int(status.get("queued") or 0)
        completed += int(status.get("completed") or 0)
    return FleetSnapshot(
        time.time() if at is None else at, len(statuses), up, slots, busy, queued, completed, errors
    )


class FleetMonitor:
    """Polls the fleet every ``interval_s`` and keeps the snapshots.

    ``on_snapshot`` (optional, plain or async) is called with each snapshot, e.g. to publish
    a ``fleet_status`` event on the engine's bus or append it to the store's events table.
    """

    def __init__(
        self,
        backend: HttpBackend,
        interval_s: float = 1.0,
        on_snapshot: Callable[[FleetSnapshot], Any] | None = None,
    ) -> None:
        self.backend = backend
        self.interval_s = interval_s
        self.on_snapshot = on_snapshot
        self.snapshots: list[FleetSnapshot] = []
        self._task: asyncio.Task[None] | None = None

    async def poll(self) -> FleetSnapshot:
        snapshot = summarise(await self.backend.status())
        self.snapshots.append(snapshot)
        if self.on_snapshot is not None:
            result = self.on_snapshot(snapshot)
            if inspect.isawaitable(result):
                await result
        return snapshot

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # a poll failure must not stop the run
                await self.poll()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="fleet-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def mean_utilisation(self) -> float:
        live = [s for s in self.snapshots if s.slots]
        return sum(s.utilisation for s in live) / len(live) if live else 0.0

    def max_queue_depth(self) -> int:
        return max((s.queued for s in self.snapshots), default=0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class GraderProcess:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


class LocalFleet:
    """``count`` grading services (``mkb grader serve``) as child processes on loopback.

    Each child leads its own process group so :meth:`close` also ends the evaluation workers
    a killed service leaves behind.
    """

    def __init__(
        self,
        count: int,
        token: str,
        *,
        gpus: str = "none",
        extra_args: tuple[str, ...] = (),
        start_timeout_s: float = 120.0,
    ) -> None:
        self.count = count
        self.token = token
        self.gpus = gpus
        self.extra_args = extra_args
        self.start_timeout_s = start_timeout_s
        self.graders: list[GraderProcess] = []
        self._logs = tempfile.TemporaryDirectory(prefix="mkb-fleet-")

    @property
    def urls(self) -> list[str]:
        return [g.url for g in self.graders]

    def start(self) -> list[str]:
        env = {**os.environ, "MKB_GRADER_TOKEN": self.token}
        for i in range(self.count):
            port = free_port()
            cmd = [
                sys.executable,
                "-m",
                "app.cli",
                "grader",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--gpus",
                self.gpus,
                *self.extra_args,
            ]
            log = Path(self._logs.name) / f"grader-{i}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    cmd,
                    cwd=REPO_ROOT,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.graders.append(GraderProcess(f"http://127.0.0.1:{port}", proc, log))
        for grader in self.graders:  # they start in parallel; wait for each banner line
            self._wait_ready(grader)
        return self.urls

    def _wait_ready(self, grader: GraderProcess) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if b"mkb grader:" in grader.log.read_bytes():
                return
            if not grader.alive:
                break
            time.sleep(0.1)
        output = grader.log.read_text(errors="replace")[-2000:]
        self.close()
        raise RuntimeError(f"grader {grader.url} did not start:\n{output}")

    def kill(self, index: int) -> None:
        """SIGKILL one service (its workers keep running until :meth:`close`)."""
        self.graders[index].process.send_signal(signal.SIGKILL)
        self.graders[index].process.wait()

    def close(self) -> None:
        for grader in self.graders:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(grader.process.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                grader.process.wait(timeout=10)
        self._logs.cleanup()

    def __enter__(self) -> LocalFleet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
