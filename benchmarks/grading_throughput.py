"""Gradings per minute through the real local backend: a fixed mix, each verdict stored.

    PYTHONPATH=. python3 benchmarks/grading_throughput.py OUT.jsonl [--device cpu|cuda]
        [--slots 2] [--repeat 20] [--mix all|solutions|repeat] [--no-template]

The mix: ``experiments/solutions.toml``'s 28 gradings (its 7 problems × 2 DSLs × solo and
transfer final), then ``--repeat`` back-to-back gradings of one small file. On a GPU the files
are ``problems/solutions/{problem}_{dsl}.py`` and the repeated files ``p28_cute.py`` then
``p28_tirx.py``, half the count each (what each DSL's compile costs a first and a later
grading of one source; ``clock.compile_cache`` says whether an earlier one's was reused).
On a CPU no DSL kernel runs, so the plain-PyTorch honest p28 fixtures
(``tests/grading/fixtures/honest/``) stand in, cycled over the 28, and the repeated files are
``p28_plain.py`` (as CuTe: nothing compiles) then ``compiled/p28_tirx_llvm.py`` (a TIRx kernel
built by ``tvm.compile`` for the CPU, target llvm): a CPU preview, never comparable with a GPU
figure. Compiled modules are kept in a fresh folder for the run (``$MKB_COMPILE_CACHE`` when
set), so the first grading of each file compiles.

``--slots`` clients keep one grading each in the backend's queue (as the engine's sandboxes do)
and each verdict is written into a real store (``storage``) before the job counts as done.
One row per grading goes to OUT.jsonl; OUT.jsonl.summary.json holds gradings per minute,
per-job wall p50/p95 from queue to stored verdict, ``runner_wait`` p50/p95, the compile
figures of the repeated file (first grading against the later ones), CPU per grading (a
cpuacct cgroup, where this process may make one: root on cgroup v1), ``import torch`` on this
host and, on a GPU, the busy share and peak memory per problem (``nvidia-smi`` sampled).
``--budget-s`` bounds the run: no grading starts after it (the solutions mix gets 60 % of it,
the repeated file the rest) and the summary counts the gradings not reached.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.analysis.spans import span_of  # noqa: E402
from engine.grading.api import GradeRequest  # noqa: E402
from engine.grading.backends.local import LocalBackend  # noqa: E402
from engine.grading.options import EvalConfig  # noqa: E402
from storage import writes  # noqa: E402
from storage.store import Store  # noqa: E402

HONEST = REPO / "tests" / "grading" / "fixtures" / "honest"
SOLUTIONS = REPO / "problems" / "solutions"
CGROUP = Path("/sys/fs/cgroup/cpuacct")
# the phases a DSL compile falls in: the import (module-level compiles), the first calls
COMPILE_PHASES = ("import", "correctness")


def solutions_mix(device: str) -> list[tuple[str, str, Path]]:
    """(problem, dsl, file) for the 28 gradings of experiments/solutions.toml."""
    spec = tomllib.loads((REPO / "experiments" / "solutions.toml").read_text())
    problems, dsls = spec["experiment"]["problems"], spec["experiment"]["dsls"]
    if device == "cuda":
        return [(p, d, SOLUTIONS / f"{p}_{d}.py") for p in problems for _ in range(2) for d in dsls]
    stand_ins = sorted(HONEST.glob("p28_*.py"))  # p73 is a test-only fixture problem
    slots = [(d, i) for _ in problems for _ in range(2) for i, d in enumerate(dsls)]
    mix = []
    for n, (dsl, _) in enumerate(slots):
        path = stand_ins[n % len(stand_ins)]
        mix.append((path.name.split("_")[0], dsl, path))
    return mix


def repeat_mix(device: str, count: int) -> list[tuple[str, str, Path]]:
    """``count`` gradings of one small file; on a GPU half p28 CuTe then half p28 TIRx (the
    compile each DSL pays on its first and its later gradings)."""
    half = count // 2
    if device != "cuda":
        tirx = HONEST.parent / "compiled" / "p28_tirx_llvm.py"
        return [("p28", "cute", HONEST / "p28_plain.py")] * half + [("p28", "tirx", tirx)] * (
            count - half
        )
    cute = [("p28", "cute", SOLUTIONS / "p28_cute.py")] * half
    return cute + [("p28", "tirx", SOLUTIONS / "p28_tirx.py")] * (count - half)


def find_key(data: Any, key: str) -> Any:
    """The first value under ``key`` anywhere in nested dicts and lists, or None."""
    if isinstance(data, dict):
        if key in data:
            return data[key]
        data = list(data.values())
    if isinstance(data, list):
        for item in data:
            found = find_key(item, key)
            if found is not None:
                return found
    return None


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))], 3)


class CpuMeter:
    """CPU seconds of this process and everything it starts (a cpuacct cgroup), or None."""

    def __init__(self) -> None:
        self.group: Path | None = CGROUP / f"mkb-throughput-{os.getpid()}"
        try:
            self.group.mkdir()
            (self.group / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            self.group = None

    def read(self) -> float | None:
        if self.group is None:
            return None
        return int((self.group / "cpuacct.usage").read_text()) / 1e9


def import_torch_s() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-c", "import torch"], check=True)
    return round(time.perf_counter() - start, 2)


class GpuSampler:
    """``nvidia-smi`` sampled every 200 ms: the busy share and memory in use over the run."""

    def __init__(self) -> None:
        query = "--query-gpu=timestamp,index,utilization.gpu,memory.used"
        # a file, not a pipe: a full pipe would stop the sampling
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            ["nvidia-smi", query, "--format=csv,noheader,nounits", "-lms", "200"],
            stdout=self.log,
            text=True,
        )
        self.start = time.monotonic()
        self.wall_start = time.time()

    def stop(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.seek(0)
        out = self.log.read()
        self.log.close()
        samples = []  # (monotonic, busy %, MiB used)
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            try:
                stamp = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                samples.append(
                    (self.start + stamp - self.wall_start, float(parts[2]), float(parts[3]))
                )
            except (ValueError, IndexError):
                continue
        if not samples:
            return {"samples": 0}
        peak: dict[str, float] = {}
        for row in rows:  # memory in use while a grading of the problem ran (others beside it)
            inside = [mib for t, _, mib in samples if row["queued_at"] <= t <= row["done_at"] + 1]
            if inside:
                peak[row["problem"]] = max(peak.get(row["problem"], 0.0), max(inside))
        busy = [b for _, b, _ in samples]
        return {
            "samples": len(samples),
            "busy_share": round(sum(1 for b in busy if b > 0) / len(busy), 3),
            "utilization_mean_pct": round(statistics.fmean(busy), 1),
            "peak_memory_mib_by_problem": peak,
            "note": "device memory in use while a grading of the problem ran, the other slot's "
            "grading and the runners started ahead included",
        }


async def grade_all(
    backend: LocalBackend,
    store: Store,
    jobs: list[tuple[str, str, Path]],
    clients: int,
    phase: str,
    device: str,
    stop_at: float | None = None,
    log: Any = None,
) -> list[dict[str, Any]]:
    """Grade ``jobs`` with ``clients`` outstanding at a time; one row per grading. No new
    grading starts after ``stop_at`` (monotonic): the ones not reached are left out."""
    queue: asyncio.Queue[tuple[int, tuple[str, str, Path]]] = asyncio.Queue()
    for item in enumerate(jobs):
        queue.put_nowait(item)
    rows: list[dict[str, Any]] = []

    async def client() -> None:
        while not queue.empty() and (stop_at is None or time.monotonic() < stop_at):
            n, (problem, dsl, path) = queue.get_nowait()
            row = await grade_one(backend, store, phase, n, problem, dsl, path, device)
            rows.append(row)
            if log is not None:  # as each ends: a run cut short keeps what it graded
                log.write(json.dumps(row) + "\n")
                log.flush()

    await asyncio.gather(*(client() for _ in range(clients)))
    return sorted(rows, key=lambda r: r["queued_at"])


async def grade_one(
    backend: LocalBackend,
    store: Store,
    phase: str,
    n: int,
    problem: str,
    dsl: str,
    path: Path,
    device: str,
) -> dict[str, Any]:
    """Queue one grading in the store and the backend; the row once its verdict is stored."""
    source = path.read_text()
    queued = time.monotonic()
    key = f"{phase}-{n}"

    def open_job(db: Any) -> int:
        attempt = writes.ensure_attempt(
            db, "throughput", key, model="bench", problem_id=problem, dsl=dsl, arm=f"solo_{dsl}"
        )
        submission = writes.add_submission(db, attempt, 1, source, purpose="final")
        return writes.start_grading_job(db, submission, "local")

    job_id = await store.write(open_job)
    request = GradeRequest(problem, dsl, source, device=device, request_id=key, purpose="final")
    feedback = await backend.grade(request)
    await store.write(writes.finish_grading_job, job_id, feedback.to_dict())
    timings = feedback.timings_s or {}
    graded = feedback.verdict in ("pass", "preview")  # a CPU preview is no failure either
    return {
        "phase": phase,
        "n": n,
        "problem": problem,
        "dsl": dsl,
        "file": str(path.relative_to(REPO)),
        "verdict": feedback.verdict,
        "reason": feedback.reason,
        "queued_at": queued,
        "done_at": time.monotonic(),
        "wall_s": round(time.monotonic() - queued, 3),
        "timings_s": timings,
        "compile_s": sum(float(timings.get(p, 0.0)) for p in COMPILE_PHASES),
        "judge_peak_gib": find_key(feedback.to_dict(), "judge_peak_gib"),
        "compile_cache": (feedback.clock or {}).get("compile_cache"),
        "runner_from_template": (feedback.clock or {}).get("runner_from_template"),
        "host": feedback.host,
        # the runtimes, so the back-to-back repeats double as an A/A series of one file
        "impl_median_ms": feedback.impl_median_ms,
        "span_ms": span_of(feedback.to_dict(), "submission"),
        # what a failed grading said, so a run on a lent device can be diagnosed from its record
        "message": "" if graded else feedback.message[-1500:],
        "log_tail": "" if graded else feedback.log_tail[-3000:],
    }


def spread_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One file's gradings as an A/A series, per clock: max/min and the SD of log runtime
    (passing gradings with a positive runtime only; None below two)."""
    out: dict[str, Any] = {}
    for clock, key in (("e2e", "impl_median_ms"), ("span", "span_ms")):
        values = [
            float(r[key])
            for r in rows
            if isinstance(r.get(key), (int, float)) and math.isfinite(r[key]) and r[key] > 0
        ]
        out[clock] = {
            "n": len(values),
            "max_over_min": round(max(values) / min(values), 4) if len(values) > 1 else None,
            "sd_log": round(statistics.stdev(math.log(v) for v in values), 4)
            if len(values) > 1
            else None,
        }
    return out


def summarize(
    rows: list[dict[str, Any]],
    elapsed_s: float,
    cpu: dict[str, float | None],
    gpu: dict[str, Any] | None,
    extra: dict[str, Any],
) -> dict[str, Any]:
    walls = [r["wall_s"] for r in rows]
    waits = [float(r["timings_s"]["runner_wait"]) for r in rows if "runner_wait" in r["timings_s"]]
    # the first grading of each slot meets the runners the backend's start set going, not yet
    # ready: the rest is the steady state (both are reported)
    settled = [float(r["timings_s"].get("runner_wait", 0.0)) for r in rows[extra["clients"] :]]
    compile_by_file: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["file"] for r in rows if r["phase"] == "repeat"):
        mine = [r for r in rows if r["phase"] == "repeat" and r["file"] == name]
        later = [r["compile_s"] for r in mine[1:]]
        compile_by_file[name] = {
            "first_s": round(mine[0]["compile_s"], 3),
            "later_median_s": round(statistics.median(later), 3) if later else None,
            "later_range_s": [round(min(later), 3), round(max(later), 3)] if later else None,
            "cache": [(r.get("compile_cache") or "-") for r in mine],
            "runtimes": spread_of(mine),
            # each phase apart: a TIRx import is mostly ``import tvm``, its compile falls in
            # the first call (correctness) unless the kernels are built at import
            "by_phase": {
                phase: {
                    "first_s": round(float(mine[0]["timings_s"].get(phase, 0.0)), 3),
                    "later_median_s": round(
                        statistics.median(float(r["timings_s"].get(phase, 0.0)) for r in mine[1:]),
                        3,
                    )
                    if later
                    else None,
                }
                for phase in COMPILE_PHASES
            },
        }
    verdicts: dict[str, int] = {}
    for r in rows:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    return {
        **extra,
        "gradings": len(rows),
        "verdicts": verdicts,
        "elapsed_s": round(elapsed_s, 1),
        "gradings_per_minute": round(len(rows) / elapsed_s * 60, 2) if elapsed_s else None,
        "wall_p50_s": percentile(walls, 0.5),
        "wall_p95_s": percentile(walls, 0.95),
        "runner_wait_p50_s": percentile(waits, 0.5),
        "runner_wait_p95_s": percentile(waits, 0.95),
        "runner_wait_max_s": max(waits) if waits else None,
        "runner_wait_after_first_p50_s": percentile(settled, 0.5),
        "runner_wait_after_first_p95_s": percentile(settled, 0.95),
        "runners_from_template": sum(1 for r in rows if r.get("runner_from_template")),
        # the import and correctness phases, where a DSL compiles, per repeated file
        "compile": compile_by_file,
        "cpu": cpu,
        "gpu": gpu,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    meter = CpuMeter()
    Path(args.out).write_text("")
    mixes: list[tuple[str, list[tuple[str, str, Path]]]] = []
    if args.mix in ("all", "solutions"):
        mixes.append(("solutions", solutions_mix(args.device)))
    if args.mix in ("all", "repeat"):
        mixes.append(("repeat", repeat_mix(args.device, args.repeat)))
    config = EvalConfig(runner_template=not args.no_template)
    if args.device == "cuda":
        gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else "auto"
        backend = LocalBackend(gpus=gpus, config=config)
    else:  # start-ahead on: the figure this benchmark exists for (docs/benchmarks.md)
        backend = LocalBackend(
            gpus=None, preview_slots=args.slots, config=config, preview_ahead=not args.no_ahead
        )
    sampler = GpuSampler() if args.device == "cuda" and shutil.which("nvidia-smi") else None
    cpu: dict[str, float | None] = {"start": meter.read()}
    rows: list[dict[str, Any]] = []
    not_reached: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # a cold compile cache: the first grading of each repeated file compiles
        os.environ.setdefault("MKB_COMPILE_CACHE", str(Path(tmp) / "compile"))
        store = Store(Path(tmp) / "throughput.sqlite")
        await store.write(writes.create_experiment, "throughput", "throughput")
        started = time.monotonic()
        await backend.start()
        cpu["after_backend_start"] = meter.read()
        backend_start_s = time.monotonic() - started
        began = time.monotonic()
        try:
            for i, (phase, jobs) in enumerate(mixes):
                # a budget: the solutions mix gets 60 % of it, the repeated file the rest
                share = 0.6 if i == 0 and len(mixes) > 1 else 1.0
                left = args.budget_s - (time.monotonic() - began) if args.budget_s else None
                stop_at = time.monotonic() + left * share if left is not None else None
                before = meter.read()
                with open(args.out, "a") as log:
                    done = await grade_all(
                        backend, store, jobs, args.slots, phase, args.device, stop_at, log
                    )
                rows += done
                after = meter.read()
                if before is not None and after is not None and done:
                    cpu[f"{phase}_per_grading_s"] = round((after - before) / len(done), 3)
                not_reached[phase] = len(jobs) - len(done)
        finally:
            elapsed = time.monotonic() - began
            await backend.close()
            store.close()
    gpu = sampler.stop(rows) if sampler is not None else None
    extra = {
        "device": args.device,
        "slots": len(backend.slots),
        "clients": args.slots,
        "mix": args.mix,
        "backend_start_s": round(backend_start_s, 2),
        "budget_s": args.budget_s or None,
        "not_reached": not_reached,
        "import_torch_s": import_torch_s(),
        "host_cpus": len(os.sched_getaffinity(0)),
        "runner_template": not args.no_template,
        "load_average": os.getloadavg(),  # at the end: the host is shared
    }
    return summarize(rows, elapsed, cpu, gpu, extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="rows (JSON lines); the summary goes to OUT.summary.json")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--slots", type=int, default=2, help="CPU slots; clients on a GPU")
    parser.add_argument("--gpus", default="", help="GPU indices (default: all)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--mix", choices=("all", "solutions", "repeat"), default="all")
    parser.add_argument(
        "--budget-s", type=float, default=0.0, help="start no grading after this (0: none)"
    )
    parser.add_argument("--no-ahead", action="store_true", help="CPU: start nothing ahead")
    parser.add_argument(
        "--no-template",
        action="store_true",
        help="start a fresh runner per grading instead of forking the slot's runner template",
    )
    args = parser.parse_args(argv)
    summary = asyncio.run(run(args))
    Path(args.out + ".summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
