"""Grading on a Ray cluster: one warm grader actor per GPU, faults survived, nothing recorded twice.

The engine connects to a Ray cluster (token authentication on), starts one
:class:`~engine.grading.backends.ray_actor.GraderActor` per GPU (``num_gpus=1``, or a share
of one with ``graders_per_gpu``; an optional custom resource pins them to a kind of host) and
keeps its own FIFO queue of grading jobs. One lane per actor hands it one job at a time
(``pipeline`` at a time, the rest waiting at the actor, which grades one at a time) and awaits
the call from the engine's asyncio loop; while a call is out, the lane pings the actor.

Ray's delivery is at least once: an actor that dies is restarted (``max_restarts=-1``) and
the call it held is run again on the new incarnation (``max_task_retries=-1``). The engine
does not wait for that: when a ping times out or a new incarnation answers, the job goes back
to the front of the queue for the next free grader, and the old call becomes a straggler.
Whichever result of a job arrives first is kept; any later one is a duplicate, counted,
handed to the duplicate sink (the engine records it in the store) and dropped
(:mod:`engine.grading.backends.ledger`). A job that loses its grader ``max_dispatches`` times
ends as an infrastructure error (the engine's retry policy decides what follows).

A request that names its slot (``GradeRequest.slot``, a paired job's: the ``Feedback.host`` a
lane's grader reported) waits in that lane's own queue and is taken only by it; when the lane
loses its grader those requests go back to the shared queue (the feedback says where they
ran, ``engine/paired_repeats.py``).

Ray is an optional extra: nothing here imports it until :meth:`RayBackend.start`, and
:func:`require_ray` turns a missing install into a message saying how to install it.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from engine.grading.api import Feedback, GradeRequest
from engine.grading.backends.ledger import DuplicateSink, JobLedger, job_key
from engine.grading.backends.ray_actor import GraderActor, GraderBuilder, LocalGrader
from engine.grading.backends.ray_options import INSTALL_HINT, RayOptions

DEFAULT_TOKEN_PATH = Path.home() / ".ray" / "auth_token"


class RayUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot be used; the message says what to do."""


def require_ray() -> ModuleType:
    """Import Ray, or explain how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(
            f'grading = "ray" needs Ray, which is not installed: {INSTALL_HINT}'
        ) from exc
    return ray


@dataclass
class _Job:
    key: str
    request: GradeRequest
    future: asyncio.Future[Feedback]


@dataclass
class _Lane:
    index: int
    actor: Any
    incarnation: str | None = None
    host: str = ""
    gpu_name: str | None = None
    up: bool = False
    jobs: list[_Job] = field(default_factory=list)  # handed to the actor, not yet answered
    pinned: list[_Job] = field(default_factory=list)  # waiting for this lane's slot only
    reviving: asyncio.Lock = field(default_factory=asyncio.Lock)
    restarts: int = 0
    completed: int = 0


def refresh_ray_config() -> None:
    """Make an already imported Ray read ``RAY_AUTH_MODE`` again (it reads it on import)."""
    raylet = sys.modules.get("ray._raylet")
    if raylet is not None:
        raylet.Config.initialize("")


def use_token_auth(options: RayOptions) -> None:
    """Turn token authentication on for this process (Ray reads it from the environment)."""
    os.environ["RAY_AUTH_MODE"] = "token"
    refresh_ray_config()
    token = os.environ.get(options.token_env, "").strip()
    if token:
        os.environ["RAY_AUTH_TOKEN"] = token
        return
    has_file = bool(os.environ.get("RAY_AUTH_TOKEN_PATH")) or DEFAULT_TOKEN_PATH.is_file()
    if not has_file and options.address != "local":
        raise RayUnavailable(
            f"[grading.ray]: token authentication is required: put the cluster's token in "
            f"${options.token_env} (ray get-auth-token prints it on the head node)"
        )


class RayBackend:
    """Grades on a Ray cluster's GPUs behind the engine's own queue (one job per grader)."""

    name = "ray"

    def __init__(
        self,
        options: RayOptions | None = None,
        builder: GraderBuilder | None = None,
        duplicate_sink: DuplicateSink | None = None,
    ) -> None:
        self.options = options or RayOptions()
        self.builder = builder or LocalGrader()
        self.ledger = JobLedger(duplicate_sink)
        self.lanes: list[_Lane] = []
        self.jobs: dict[str, _Job] = {}
        self.slot_lanes: dict[str, _Lane] = {}  # Feedback.host -> the lane that reported it
        self._heap: list[tuple[int, int, _Job]] = []
        self._seq = itertools.count()
        self._ready: asyncio.Condition | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._start_lock: asyncio.Lock | None = None
        self._started = False
        self._closed = False
        self._owns_ray = False
        self.ray: ModuleType | None = None
        self.cluster: dict[str, Any] = {"nodes": 0, "nodes_total": 0, "gpus": 0.0}
        self.completed = 0
        self.requeued = 0
        self.status_sink: Callable[[dict[str, Any]], Any] | None = None  # each cluster poll
        self.started_at = time.time()

    def attach_duplicate_sink(self, sink: DuplicateSink) -> None:
        """Where duplicates go (the engine records them in its store)."""
        self.ledger.sink = sink

    # -- connecting ------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect, start one grader per GPU and their lanes (once; later calls wait)."""
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            if self._closed:
                raise RayUnavailable("the ray backend is closed")
            use_token_auth(self.options)
            self.ray = require_ray()
            if self.options.address == "local":  # starts a node: signal handlers, main thread
                self._connect()
            else:
                await asyncio.to_thread(self._connect)
            count = await asyncio.to_thread(self._grader_count)
            actor_class = self.ray.remote(GraderActor).options(
                num_gpus=1.0 / self.options.graders_per_gpu,
                num_cpus=0,
                resources=dict(self.options.resources) or None,
                max_restarts=-1,
                max_task_retries=-1,
            )
            self._ready = asyncio.Condition()
            for index in range(count):
                self.lanes.append(_Lane(index, actor_class.remote(self.builder)))
                for _ in range(self.options.pipeline):
                    self._spawn(self._lane_loop(self.lanes[-1]))
            self._spawn(self._watch_cluster())
            self._started = True

    def _connect(self) -> None:
        assert self.ray is not None
        if self.ray.is_initialized():
            return
        address = None if self.options.address == "local" else self.options.address
        kwargs: dict[str, Any] = {}
        if address is None:
            kwargs["include_dashboard"] = False  # the dashboard and the jobs API are not needed
        try:
            self.ray.init(
                address=address,
                namespace=self.options.namespace,
                logging_level=logging.WARNING,
                log_to_driver=False,
                **kwargs,
            )
        except Exception as exc:  # noqa: BLE001 - say which setting to look at
            raise RayUnavailable(
                f"[grading.ray].address {self.options.address!r}: cannot connect to the Ray "
                f"cluster: {type(exc).__name__}: {exc}"
            ) from exc
        self._owns_ray = True

    def _grader_count(self) -> int:
        """Graders to start: every GPU's worth (capped by the resource label and ``graders``)."""
        assert self.ray is not None
        resources = self.ray.cluster_resources()
        slots = float(resources.get("GPU", 0.0))
        for name, amount in self.options.resources.items():
            slots = min(slots, float(resources.get(name, 0.0)) / float(amount))
        count = int(slots) * self.options.graders_per_gpu
        if self.options.graders is not None:
            count = min(count, self.options.graders)
        if count < 1:
            label = f" with resources {self.options.resources}" if self.options.resources else ""
            raise RayUnavailable(
                f"[grading.ray]: the Ray cluster at {self.options.address!r} has no GPU{label} "
                f"for a grader (nodes declare theirs with ray start --num-gpus)"
            )
        return count

    # -- the queue -------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _put(self, job: _Job, first: bool) -> None:
        assert self._ready is not None
        async with self._ready:
            heapq.heappush(self._heap, (0 if first else 1, next(self._seq), job))
            self._ready.notify()

    async def _next(self, lane: _Lane) -> _Job:
        assert self._ready is not None
        async with self._ready:
            while True:
                while lane.pinned:
                    job = lane.pinned.pop(0)
                    if not job.future.done():
                        return job
                while self._heap:
                    _, _, job = heapq.heappop(self._heap)
                    if not job.future.done():
                        return job
                await self._ready.wait()

    async def grade(self, request: GradeRequest) -> Feedback:
        await self.start()
        key = job_key()
        job = _Job(key, request, asyncio.get_running_loop().create_future())
        self.jobs[key] = job
        lane = self.slot_lanes.get(request.slot) if request.slot else None
        if lane is not None and lane.up:
            assert self._ready is not None
            async with self._ready:
                lane.pinned.append(job)
                self._ready.notify_all()
        else:
            await self._put(job, first=False)
        try:
            return await job.future
        finally:
            self.jobs.pop(key, None)

    async def gpu_names(self) -> list[str]:
        """The GPU models the graders hold (the engine checks them against [grading] gpu)."""
        await self.start()
        deadline = time.monotonic() + 3 * self.options.lost_after_s
        while any(lane.incarnation is None for lane in self.lanes):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        return [lane.gpu_name for lane in self.lanes if lane.gpu_name]

    # -- one lane per actor ----------------------------------------------------------------
    async def _lane_loop(self, lane: _Lane) -> None:
        """One of the lane's ``pipeline`` workers: each holds one job of the lane at a time."""
        while not self._closed:
            if not lane.up:
                async with lane.reviving:  # one worker revives; the others wait for it
                    if not lane.up:
                        await self._revive(lane)
                continue
            job = await self._next(lane)
            if self.ledger.dispatches(job.key) >= self.options.max_dispatches:
                self._finish(job, self._lost_feedback(job))
                continue
            dispatch = self.ledger.dispatch(job.key)
            lane.jobs.append(job)
            try:
                await self._run(lane, job, dispatch)
            finally:
                lane.jobs.remove(job)

    async def _run(self, lane: _Lane, job: _Job, dispatch: int) -> None:
        """Hand ``job`` to ``lane``'s actor and wait for it, pinging the actor meanwhile."""
        call = lane.actor.grade.remote(job.key, dispatch, job.request.to_dict())
        result = asyncio.ensure_future(self._outcome(call))
        while True:
            done, _ = await asyncio.wait({result}, timeout=self.options.heartbeat_s)
            if done:
                reply = result.result()
                if isinstance(reply, dict):
                    lane.completed += 1
                    slot = str((reply.get("feedback") or {}).get("host") or "")
                    if slot:
                        self.slot_lanes[slot] = lane
                    await self._deliver(reply)
                else:  # the actor died under it: Ray restarts it, the job goes to another
                    await self._down(lane)
                    await self._requeue(job)
                return
            if not await self._answers(lane):
                await self._down(lane)
                await self._requeue(job)
                self._spawn(self._straggler(result))
                return

    async def _down(self, lane: _Lane) -> None:
        """The lane lost its grader: its pinned requests go back to the shared queue."""
        lane.up = False
        self.slot_lanes = {k: v for k, v in self.slot_lanes.items() if v is not lane}
        pinned, lane.pinned = lane.pinned, []
        for job in pinned:
            await self._put(job, first=True)

    async def _outcome(self, call: Any) -> dict[str, Any] | BaseException:
        try:
            return await call  # type: ignore[no-any-return]
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - an actor or task failure, reported
            return exc

    async def _answers(self, lane: _Lane) -> bool:
        """Whether the incarnation that took the job still answers."""
        try:
            info = await asyncio.wait_for(
                self._outcome(lane.actor.ping.remote()), self.options.lost_after_s
            )
        except TimeoutError:
            return False
        return isinstance(info, dict) and info.get("incarnation") == lane.incarnation

    async def _straggler(self, result: asyncio.Future[Any]) -> None:
        """A call given up on: if Ray's retry still answers, the ledger decides what it is."""
        reply = await result
        if isinstance(reply, dict):
            await self._deliver(reply)

    async def _revive(self, lane: _Lane) -> None:
        """Wait until the lane's actor answers (a restart counts), then warm it."""
        try:
            info = await asyncio.wait_for(
                self._outcome(lane.actor.ping.remote()), self.options.lost_after_s
            )
        except TimeoutError:
            info = None
        if not isinstance(info, dict):
            await asyncio.sleep(self.options.heartbeat_s)
            return
        if lane.incarnation is not None and info["incarnation"] != lane.incarnation:
            lane.restarts += 1
        lane.incarnation, lane.host = info["incarnation"], str(info.get("host", ""))
        lane.gpu_name = info.get("gpu_name")
        try:
            warmed = await asyncio.wait_for(
                self._outcome(lane.actor.warm.remote()), self.options.warm_timeout_s
            )
        except TimeoutError:
            warmed = None
        if isinstance(warmed, dict) and warmed.get("incarnation") != lane.incarnation:
            await asyncio.sleep(self.options.heartbeat_s)  # restarted meanwhile: again
            return
        # warm, or its warm parent would not start: its gradings then say why (and the local
        # backend starts the parent again, or grades cold)
        lane.up = True

    # -- results ---------------------------------------------------------------------------
    async def _deliver(self, reply: dict[str, Any]) -> None:
        key, feedback = str(reply["key"]), Feedback.from_dict(reply["feedback"])
        first = await self.ledger.deliver(
            key, int(reply["dispatch"]), str(reply["worker"]), feedback
        )
        if first:
            job = self.jobs.get(key)
            if job is not None:
                self._finish(job, feedback)

    def _finish(self, job: _Job, feedback: Feedback) -> None:
        if not job.future.done():
            job.future.set_result(feedback)
            self.completed += 1

    async def _requeue(self, job: _Job) -> None:
        """Back to the front of the queue, unless it lost its grader too often already."""
        if job.future.done():
            return
        if self.ledger.dispatches(job.key) >= self.options.max_dispatches:
            self._finish(job, self._lost_feedback(job))
            return
        self.requeued += 1
        await self._put(job, first=True)

    def _lost_feedback(self, job: _Job) -> Feedback:
        tries = self.ledger.dispatches(job.key)
        return Feedback(
            "error",
            "crash",
            f"ray grader lost {tries} times while grading this job",
            job.request.request_id,
            job.request.problem_id,
            job.request.dsl,
        )

    # -- the cluster -----------------------------------------------------------------------
    async def _watch_cluster(self) -> None:
        while not self._closed:
            with contextlib.suppress(Exception):  # a failed poll must not stop the run
                self.cluster = await asyncio.to_thread(self._poll_nodes)
                if self.status_sink is not None:
                    self.status_sink(self.status())
            await asyncio.sleep(max(1.0, self.options.heartbeat_s))

    def _poll_nodes(self) -> dict[str, Any]:
        assert self.ray is not None
        nodes = self.ray.nodes()
        alive = [n for n in nodes if n.get("Alive")]
        gpus = sum(float(n.get("Resources", {}).get("GPU", 0.0)) for n in alive)
        return {"nodes": len(alive), "nodes_total": len(nodes), "gpus": gpus}

    def status(self) -> dict[str, Any]:
        """The cluster as the progress display, the TUI and ``mkb run --json`` show it."""
        return {
            "backend": self.name,
            "address": self.options.address,
            "nodes": int(self.cluster.get("nodes", 0)),
            "nodes_total": int(self.cluster.get("nodes_total", 0)),
            "gpus": float(self.cluster.get("gpus", 0.0)),
            "graders": len(self.lanes),
            "up": sum(1 for lane in self.lanes if lane.up),
            "busy": sum(1 for lane in self.lanes if lane.jobs),
            "queued": sum(1 for _, _, job in self._heap if not job.future.done()),
            "completed": self.completed,
            "restarts": sum(lane.restarts for lane in self.lanes),
            "requeued": self.requeued,
            "duplicates": len(self.ledger.duplicates),
            "uptime_s": round(time.time() - self.started_at, 1),
        }

    async def close(self) -> None:
        """Stop the lanes, the graders (their warm parents first) and the connection."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for job in list(self.jobs.values()):
            self._finish(job, Feedback("error", "crash", "the ray backend closed"))
        if self.ray is None:
            return
        closing = [self._outcome(lane.actor.close.remote()) for lane in self.lanes if lane.up]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*closing), 30.0)
        for lane in self.lanes:
            with contextlib.suppress(Exception):
                self.ray.kill(lane.actor, no_restart=True)
        if self._owns_ray:
            await asyncio.to_thread(self.ray.shutdown)
