"""Grading-fleet throughput: scripted attempts through the real scheduler, store and http pool.

N ``mkb grader serve`` services start as child processes on 127.0.0.1 (CPU preview here, GPUs
on a GPU host with ``--gpus auto``). Instant scripted agents
(engine.standins.simulated.SimulatedRunner) submit a real plain-torch p28 implementation
``--submissions`` times and once for the final evaluation, so every grading is a real
evaluation in a warm worker. Optionally one service is SIGKILLed once a share of the gradings
is done. Reports gradings per second, feedback latency
(submission row written → graded) and fleet utilisation from the /status poller.

    .venv/bin/python benchmarks/fleet_throughput.py [--graders 4] [--replicates 13]
        [--submissions 1] [--sandboxes 16] [--kill-after 0.25] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.attempts.spec import AttemptOutcome, AttemptSpec  # noqa: E402
from engine.config import ExperimentConfig, parse_config  # noqa: E402
from engine.grading.api import Feedback, GradeRequest, GradingBackend  # noqa: E402
from engine.grading.backends.fleet import FleetBackend, FleetMonitor, LocalFleet  # noqa: E402
from engine.scheduler import Engine  # noqa: E402
from engine.standins.simulated import SimulatedRunner  # noqa: E402
from storage.store import Store  # noqa: E402

TOKEN = "fleet-benchmark-token"

# A correct p28 (fused add + RMSNorm) in plain torch: passes every check a CPU preview runs.
P28_PLAIN = """
import torch


def solve(hidden_states, residual, weight):
    total = hidden_states.float() + residual.float()
    scale = torch.rsqrt(total.pow(2).mean(dim=-1, keepdim=True) + 1e-5)
    return (total * scale * weight.float()).to(hidden_states.dtype)
"""


class WithImplementation:
    """Appends the p28 implementation to each scripted source (which is only a comment)."""

    def __init__(self, inner: GradingBackend) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "grading")

    async def grade(self, request: GradeRequest) -> Feedback:
        return await self.inner.grade(replace(request, source=request.source + P28_PLAIN))

    async def close(self) -> None:
        return None


class ScriptedRunner:
    """SimulatedRunner's instant agent, submitting a real implementation each time."""

    def __init__(self, submissions: int) -> None:
        self.inner = SimulatedRunner(submissions=submissions, blank_skill_rate=0.0)

    async def __call__(
        self, spec: AttemptSpec, backend: GradingBackend, observer: Any
    ) -> AttemptOutcome:
        return await self.inner(spec, WithImplementation(backend), observer)


def fleet_config(
    urls: list[str], replicates: int, submissions: int, sandboxes: int
) -> ExperimentConfig:
    url_list = ", ".join(f'"{u}"' for u in urls)
    return parse_config(f"""
[experiment]
name = "fleet"
problems = ["p28"]
replicates = {replicates}
max_submissions = {submissions}
agent = "simulated"
grading = "http"

[[models]]
name = "scripted/fleet"

[grading]
urls = [{url_list}]
token = "{TOKEN}"
tries = 1

[concurrency]
sandboxes = {sandboxes}
attempts_per_model = {sandboxes}
grading_slots = {len(urls)}
""")


@dataclass
class FleetResult:
    graders: int
    attempts: int
    gradings: int
    wall_s: float
    gradings_per_s: float
    latency_p50_s: float
    latency_p95_s: float
    latency_max_s: float
    error_jobs: int
    retried_submissions: int
    mean_utilisation: float
    max_queue_depth: int
    killed_after_done: int | None
    by_state: dict[str, int]
    db_path: str
    experiment_id: str


def _seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def _graded(db: Any) -> int:
    return int(db.execute("SELECT count(*) FROM submissions WHERE state='done'").fetchone()[0])


async def _kill_when(fleet: LocalFleet, backend: FleetBackend, store: Store, threshold: int) -> int:
    """SIGKILL grader 0 once ``threshold`` gradings are done and it has work in hand."""
    target = fleet.urls[0]
    while True:
        done = await store.read(_graded)
        if done >= threshold and backend.in_flight.get(target, 0) > 0:
            fleet.kill(0)
            return done
        await asyncio.sleep(0.05)


async def run_fleet(
    db_path: Path,
    *,
    graders: int = 4,
    replicates: int = 13,
    submissions: int = 1,
    sandboxes: int = 16,
    kill_after: float | None = 0.25,
    monitor_interval_s: float = 0.25,
) -> FleetResult:
    """Run one fleet experiment; the store at ``db_path`` keeps every row for inspection."""
    with LocalFleet(graders, TOKEN) as fleet:
        config = fleet_config(fleet.urls, replicates, submissions, sandboxes)
        backend = FleetBackend(**config.grading_options, backoff_s=0.05)
        monitor = FleetMonitor(backend, interval_s=monitor_interval_s)
        expected = len(config.dsls) * 2 * replicates * (submissions + 1)
        with Store(db_path) as store:
            engine = Engine(store, config, ScriptedRunner(submissions), backend)
            killer = None
            if kill_after is not None:
                threshold = max(1, int(expected * kill_after))
                killer = asyncio.create_task(_kill_when(fleet, backend, store, threshold))
            monitor.start()
            started = time.perf_counter()
            try:
                summary = await engine.run()
            finally:
                wall = time.perf_counter() - started
                await monitor.stop()
                killed_at = None
                if killer is not None:
                    if killer.done():
                        killed_at = killer.result()
                    else:
                        killer.cancel()
                await backend.close()
            rows = store.read_sync(
                lambda db: db.execute(
                    "SELECT submitted_at, graded_at FROM submissions WHERE graded_at IS NOT NULL"
                ).fetchall()
            )
            error_jobs, retried = store.read_sync(
                lambda db: db.execute(
                    "SELECT (SELECT count(*) FROM grading_jobs WHERE state='error'),"
                    " (SELECT count(DISTINCT submission_id) FROM grading_jobs WHERE try > 1)"
                ).fetchone()
            )
    latencies = sorted(_seconds(a, b) for a, b in rows) or [0.0]
    return FleetResult(
        graders=graders,
        attempts=summary.attempts,
        gradings=len(rows),
        wall_s=round(wall, 2),
        gradings_per_s=round(len(rows) / wall, 2) if wall else 0.0,
        latency_p50_s=round(statistics.median(latencies), 3),
        latency_p95_s=round(latencies[int(0.95 * (len(latencies) - 1))], 3),
        latency_max_s=round(latencies[-1], 3),
        error_jobs=int(error_jobs),
        retried_submissions=int(retried),
        mean_utilisation=round(monitor.mean_utilisation(), 3),
        max_queue_depth=monitor.max_queue_depth(),
        killed_after_done=killed_at,
        by_state=dict(summary.by_state),
        db_path=str(db_path),
        experiment_id=config.id,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graders", type=int, default=4)
    parser.add_argument("--replicates", type=int, default=13, help="× 4 arms = attempts")
    parser.add_argument("--submissions", type=int, default=1, help="feedback rounds per attempt")
    parser.add_argument("--sandboxes", type=int, default=16, help="attempts at once")
    parser.add_argument(
        "--kill-after",
        type=float,
        default=None,
        help="SIGKILL grader 0 after this share of gradings (e.g. 0.25)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mkb-fleet-bench-") as tmp:
        result = asyncio.run(
            run_fleet(
                Path(tmp) / "fleet.sqlite",
                graders=args.graders,
                replicates=args.replicates,
                submissions=args.submissions,
                sandboxes=args.sandboxes,
                kill_after=args.kill_after,
            )
        )
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        for key, value in asdict(result).items():
            if key not in ("db_path", "experiment_id"):
                print(f"{key:>22}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
