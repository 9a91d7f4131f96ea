"""Engine scale: simulated attempts × 11 gradings through the real scheduler and store.

Instant simulated agents (10 feedback submissions + 1 final evaluation each) and an instant
simulated grader, so the figure is the engine's own overhead: planning, scheduling, SQLite
writes of every submission, grading job, attempt transition, comparison and event.

    .venv/bin/python benchmarks/engine_scale.py [--attempts 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from pathlib import Path

from engine.config import parse_config
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage.store import Store


def config_text(attempts: int, models: int) -> str:
    replicates = max(1, attempts // (4 * models))
    model_tables = "\n".join(f'[[models]]\nname = "sim/m{i}"\n' for i in range(models))
    return f"""
[experiment]
name = "scale"
problems = ["p28"]
replicates = {replicates}
agent = "simulated"
grading = "simulated"

{model_tables}
[concurrency]
sandboxes = 64
attempts_per_model = 64
"""


async def run(attempts: int, models: int) -> dict[str, float]:
    config = parse_config(config_text(attempts, models))
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "scale.sqlite")
        runner = SimulatedRunner(submissions=10, blank_skill_rate=0.05)
        engine = Engine(store, config, runner, SimulatedBackend())
        start = time.perf_counter()
        summary = await engine.run()
        elapsed = time.perf_counter() - start
        gradings = store.read_sync(
            lambda db: db.execute("SELECT count(*) FROM grading_jobs").fetchone()[0])
        events = store.read_sync(lambda db: db.execute("SELECT count(*) FROM events").fetchone()[0])
        store.close()
    n = summary.attempts
    return {
        "attempts": n,
        "gradings": gradings,
        "events": events,
        "seconds": round(elapsed, 2),
        "lifecycles_per_minute": round(n / elapsed * 60),
        "overhead_ms_per_attempt": round(elapsed / n * 1000, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--attempts", type=int, default=2000)
    parser.add_argument("--models", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.attempts, args.models)), indent=2))


if __name__ == "__main__":
    main()
