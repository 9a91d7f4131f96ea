"""A Ray cluster on this machine for tests and benchmarks: a head and worker nodes on loopback.

Every node declares one GPU (``num_gpus=1``; on a machine without one the grader actors grade
in CPU preview) and an explicit memory budget (each node would otherwise report the whole
host's memory), and no CPUs, so Ray starts no idle workers. Token authentication is on.

Ray rewrites ``127.0.0.1`` and ``localhost`` in a bootstrap address to the host's routable
address, which a cluster bound to loopback does not listen on; the nodes therefore bind
another loopback address, ``127.0.0.2`` (the whole of 127.0.0.0/8 is loopback on Linux).

Also here: :func:`run_ray_experiment` (scripted attempts through the real scheduler, store and
the ray backend, with an optional SIGKILL of a grader actor and removal of a node part way),
used by ``tests/scale/test_ray_cluster.py`` and ``benchmarks/ray_dispatch.py``.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NODE_IP = "127.0.0.2"
NODE_MEMORY = 1024**3  # each node's declared memory budget (bytes)
# a dead node is noticed after 4 missed 0.5 s health checks (Ray's default: about 15 s)
SYSTEM_CONFIG = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 4,
    "health_check_initial_delay_ms": 0,
}


def token_env() -> str:
    """Turn token authentication on for this process and the nodes it starts; the token."""
    from engine.grading.backends.ray import refresh_ray_config

    token = os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(16)
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = token
    refresh_ray_config()
    return token


class LocalRayCluster:
    """``cluster_utils.Cluster`` with a head and ``workers`` worker nodes, one GPU each."""

    def __init__(self, workers: int = 3, node_memory: int = NODE_MEMORY) -> None:
        self.workers = workers
        self.node_memory = node_memory
        self.cluster: Any = None
        self.token = ""

    def _node_args(self) -> dict[str, Any]:
        return {
            "num_cpus": 0,
            "num_gpus": 1,
            "memory": self.node_memory,
            "object_store_memory": 80 * 1024**2,
            "node_ip_address": NODE_IP,
        }

    def start(self) -> str:
        self.token = token_env()
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                **self._node_args(),
                "include_dashboard": False,
                "_system_config": SYSTEM_CONFIG,
            },
        )
        for _ in range(self.workers):
            self.cluster.add_node(**self._node_args())
        self.cluster.wait_for_nodes()
        return str(self.cluster.address)

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def remove_node_of(self, host_pid: int) -> bool:
        """Hard-remove the worker node whose raylet runs the process ``host_pid``."""
        for node in self.cluster.worker_nodes:
            raylet = node.all_processes.get("raylet", [])
            if raylet and _ancestor(raylet[0].process.pid, host_pid):
                self.cluster.remove_node(node, allow_graceful=False)
                return True
        return False

    def shutdown(self) -> None:
        if self.cluster is not None:
            import ray

            if ray.is_initialized():
                ray.shutdown()
            self.cluster.shutdown()
            self.cluster = None

    def __enter__(self) -> LocalRayCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _ancestor(ancestor: int, pid: int) -> bool:
    """Whether ``ancestor`` is ``pid`` or one of its ancestors."""
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


@dataclass
class Faults:
    """Part-way faults: SIGKILL one busy grader actor, then hard-remove one busy worker node."""

    kill_at: float | None = 0.3  # share of gradings done
    remove_at: float | None = 0.6
    killed: dict[str, Any] = field(default_factory=dict)
    removed: dict[str, Any] = field(default_factory=dict)


def busy_pids(
    backend: Any, exclude: frozenset[int] | set[int] = frozenset()
) -> list[tuple[int, int]]:
    """(lane index, actor pid) of each busy lane whose actor is up."""
    found = []
    for lane in backend.lanes:
        if lane.jobs and lane.up and lane.incarnation:
            pid = int(lane.incarnation.split(":")[1])
            if pid not in exclude and os.path.exists(f"/proc/{pid}"):
                found.append((lane.index, pid))
    return found


async def inject(
    faults: Faults, backend: Any, cluster: LocalRayCluster, done: Any, total: int
) -> None:
    """Apply ``faults`` as ``done()`` (gradings stored) crosses each share of ``total``."""
    killed: set[int] = set()
    while faults.kill_at is not None and not faults.killed:
        if await done() >= faults.kill_at * total:
            for lane, pid in busy_pids(backend)[:1]:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
                faults.killed = {"lane": lane, "pid": pid, "done": await done(), "t": time.time()}
        await asyncio.sleep(0.05)
    while faults.remove_at is not None and not faults.removed:
        if await done() >= faults.remove_at * total:
            for lane, pid in busy_pids(backend, killed):
                if cluster.remove_node_of(pid):  # a worker node (the head stays)
                    faults.removed = {
                        "lane": lane,
                        "pid": pid,
                        "done": await done(),
                        "t": time.time(),
                    }
                    break
        await asyncio.sleep(0.05)


def experiment_toml(
    address: str,
    *,
    replicates: int,
    submissions: int,
    sandboxes: int,
    grading_slots: int,
    grader: str = "simulated",
    simulated_s: tuple[float, float] = (0.1, 0.5),
    extra: str = "",
    problems: tuple[str, ...] = ("p28",),
) -> str:
    """An experiment graded on the Ray cluster at ``address`` by instant scripted agents."""
    seconds = f"simulated_s = [{simulated_s[0]}, {simulated_s[1]}]" if grader == "simulated" else ""
    listed = ", ".join(f'"{p}"' for p in problems)
    return f"""
[experiment]
name = "ray"
problems = [{listed}]
replicates = {replicates}
max_submissions = {submissions}
agent = "simulated"
grading = "ray"

[[models]]
name = "scripted/ray"

[agent]
blank_skill_rate = 0.0

[grading.ray]
address = "{address}"
grader = "{grader}"
{seconds}
{extra}

[concurrency]
sandboxes = {sandboxes}
attempts_per_model = {sandboxes}
grading_slots = {grading_slots}
"""


def graded_count(db: Any) -> int:
    return int(db.execute("SELECT count(*) FROM submissions WHERE state='done'").fetchone()[0])


async def run_ray_experiment(
    db_path: Path,
    toml: str,
    cluster: LocalRayCluster | None = None,
    faults: Faults | None = None,
    runner: Any = None,
) -> dict[str, Any]:
    """Run ``toml`` through the real scheduler and store; returns figures and the backend."""
    from engine.config import parse_config
    from engine.factory import make_backend, make_runner
    from engine.scheduler import Engine
    from storage.store import Store

    config = parse_config(toml)
    backend: Any = make_backend(config)
    statuses: list[dict[str, Any]] = []
    backend.status_sink = statuses.append
    with Store(db_path) as store:
        engine = Engine(store, config, runner or make_runner(config), backend)
        await backend.start()
        # warm: every lane up before the clock starts (actors start in parallel)
        while sum(1 for lane in backend.lanes if lane.up) < len(backend.lanes):
            await asyncio.sleep(0.1)
        total = len(engine.plan.nodes) * (config.max_submissions + 1)
        injector = None
        if faults is not None and cluster is not None:

            async def done() -> int:
                return int(await store.read(graded_count))

            injector = asyncio.create_task(inject(faults, backend, cluster, done, total))
        started = time.perf_counter()
        try:
            summary = await engine.run()
        finally:
            wall = time.perf_counter() - started
            if injector is not None:
                injector.cancel()
            status = backend.status()
            duplicates = list(backend.ledger.duplicates)
            await backend.close()
    return {
        "wall_s": wall,
        "summary": summary,
        "status": status,
        "statuses": statuses,
        "duplicates": duplicates,
        "experiment_id": config.id,
        "expected_gradings": total,
    }
