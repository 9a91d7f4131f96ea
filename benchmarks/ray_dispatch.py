"""What Ray's dispatch costs a grading: the ray backend against a direct call and the HTTP fleet.

All three grade with the same simulated grading (``engine.standins.ray_grader``: a sleep of a
fixed length, then the simulated verdict), so only the way a job reaches a grader differs:

- direct: the grading called in this process (the local backend's path, without a child);
- ray: ``RayBackend`` with N grader actors on a one-node Ray cluster on loopback (token auth);
- http: ``FleetBackend`` over N grading services (``start_server``, one job at a time each),
  each a child process on loopback.

Latency: one job at a time, ``--calls`` jobs, mean milliseconds per grading (the added cost is
the difference to direct). Throughput: ``--jobs`` jobs kept ``--concurrency`` in flight on N
graders, each job sleeping ``--job-ms``; jobs per second. The ray backend runs twice: with
``pipeline = 1`` (its default: a grader holds one job, the others wait in the engine's queue)
and ``pipeline = 2`` (a grader holds one more, waiting at it, as an http service queues the
requests it is sent).

    .venv/bin/python benchmarks/ray_dispatch.py [--graders 4] [--calls 300] [--jobs 400]
        [--concurrency 8] [--job-ms 20] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.grading.api import Feedback, GradeRequest  # noqa: E402
from engine.standins.ray_grader import TimedSimulatedGrading  # noqa: E402

TOKEN = "ray-dispatch-benchmark-token"
ROOT = Path(__file__).resolve().parents[1]


class OneAtATime:
    """A grading service's backend: one job at a time (one GPU), the rest queue."""

    name = "simulated"

    def __init__(self, seconds: float) -> None:
        self.inner = TimedSimulatedGrading(seconds, seconds)
        self.lock = asyncio.Lock()
        self.queued = 0
        self.completed = 0

    async def grade(self, request: GradeRequest) -> Feedback:
        self.queued += 1
        async with self.lock:
            self.queued -= 1
            feedback = await self.inner.grade(request)
        self.completed += 1
        return feedback

    def status(self) -> dict[str, Any]:
        busy = int(self.lock.locked())
        return {"slots": ["sim0"], "busy": busy, "queued": self.queued, "completed": self.completed}

    async def close(self) -> None:
        return None


async def serve(port: int, seconds: float) -> None:
    """One simulated grading service (run in a child process: ``--serve PORT SECONDS``)."""
    from engine.grading.backends.http_server import start_server

    await start_server(OneAtATime(seconds), "127.0.0.1", port, TOKEN)
    print("ready", flush=True)
    await asyncio.Event().wait()


def request(n: int) -> GradeRequest:
    return GradeRequest("p28", "cute", f"# job {n}\n", request_id=f"b{n}")


async def latency_ms(backend: Any, calls: int) -> float:
    for n in range(20):  # warm the path
        await backend.grade(request(-1 - n))
    started = time.perf_counter()
    for n in range(calls):
        await backend.grade(request(n))
    return (time.perf_counter() - started) / calls * 1000


async def throughput(backend: Any, jobs: int, concurrency: int) -> float:
    queue = iter(range(jobs))

    async def worker() -> None:
        for n in queue:
            await backend.grade(request(n))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return jobs / (time.perf_counter() - started)


async def ray_figures(args: argparse.Namespace) -> dict[str, float]:
    from benchmarks.ray_local import LocalRayCluster
    from engine.grading.backends.ray import RayBackend
    from engine.grading.backends.ray_options import RayOptions
    from engine.standins.ray_grader import SimulatedGrader

    cluster = LocalRayCluster(workers=0)
    cluster.start()  # signal handlers: the main thread only
    try:
        figures = {}
        runs = (
            ("ms", 0.0, 1),
            ("jobs_per_s", args.job_ms / 1000, 1),
            ("jobs_per_s", args.job_ms / 1000, 2),
        )
        for label, seconds, pipeline in runs:
            options = RayOptions(
                address=cluster.address, graders_per_gpu=args.graders, pipeline=pipeline
            )
            backend = RayBackend(options, SimulatedGrader(seconds, seconds))
            await backend.start()
            while sum(lane.up for lane in backend.lanes) < args.graders:
                await asyncio.sleep(0.1)
            if label == "ms":
                figures["ray_ms"] = await latency_ms(backend, args.calls)
            else:
                rate = await throughput(backend, args.jobs, args.concurrency)
                figures[f"ray_pipeline{pipeline}_jobs_per_s"] = rate
            await backend.close()
        return figures
    finally:
        cluster.shutdown()


async def http_figures(args: argparse.Namespace) -> dict[str, float]:
    from engine.grading.backends.fleet import FleetBackend, free_port

    figures = {}
    for label, seconds in (("latency", 0.0), ("throughput", args.job_ms / 1000)):
        ports = [free_port() for _ in range(args.graders)]
        children = [
            subprocess.Popen(
                [sys.executable, __file__, "--serve", str(port), str(seconds)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            for port in ports
        ]
        try:
            for child in children:
                assert child.stdout is not None
                child.stdout.readline()  # "ready"
            backend = FleetBackend([f"http://127.0.0.1:{p}" for p in ports], TOKEN, tries=1)
            if label == "latency":
                figures["http_ms"] = await latency_ms(backend, args.calls)
            else:
                figures["http_jobs_per_s"] = await throughput(backend, args.jobs, args.concurrency)
            await backend.close()
        finally:
            for child in children:
                child.kill()
                child.wait()
    return figures


async def direct_figures(args: argparse.Namespace) -> dict[str, float]:
    backend = OneAtATime(0.0)
    return {"direct_ms": await latency_ms(backend, args.calls)}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "graders": args.graders,
        "calls": args.calls,
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "job_ms": args.job_ms,
        "load_1min": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }
    figures.update(await direct_figures(args))
    figures.update(await http_figures(args))
    figures.update(await ray_figures(args))
    figures["ray_added_ms"] = figures["ray_ms"] - figures["direct_ms"]
    figures["http_added_ms"] = figures["http_ms"] - figures["direct_ms"]
    for pipeline in (1, 2):
        rate = figures[f"ray_pipeline{pipeline}_jobs_per_s"]
        figures[f"ray_pipeline{pipeline}_vs_http"] = rate / figures["http_jobs_per_s"]
    figures["ideal_jobs_per_s"] = args.graders / (args.job_ms / 1000)
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graders", type=int, default=4)
    parser.add_argument("--calls", type=int, default=300, help="sequential jobs (latency)")
    parser.add_argument("--jobs", type=int, default=400, help="jobs (throughput)")
    parser.add_argument("--concurrency", type=int, default=8, help="jobs in flight")
    parser.add_argument("--job-ms", type=float, default=20.0, help="each job's grading time")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", nargs=2, metavar=("PORT", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(serve(int(args.serve[0]), float(args.serve[1])))
        return 0
    figures = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key:>24}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
