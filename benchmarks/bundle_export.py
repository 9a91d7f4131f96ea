"""Bundle export: size and time of a 24-attempt experiment's bundle (issue 34: < 5 MB, < 10 s).

The experiment runs through the real scheduler and store with instant simulated agents
(10 feedback submissions and a final evaluation each, 264 gradings), on six catalog
problems × 4 arms. Their stand-in sources are then replaced by real-sized implementations:
each graded source becomes a reference solution of its DSL (``problems/solutions``, 5-28 kB)
with a line naming the submission, so no two members are alike. ``--pad-kb`` pads every
source to that size with more real code (every reference solution in turn, from an offset of
its own, so deflate finds no repeat within its 32 kB window): 300 is the contract's cap.

    .venv/bin/python benchmarks/bundle_export.py [--pad-kb 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from engine.bundle.content import load_bundle
from engine.bundle.export import export_bundle
from engine.config import parse_config
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage.db import immediate, open_db
from storage.store import Store

PROBLEMS = ("p02", "p25", "p28", "p36", "p51", "p52")
CONFIG = f"""
[experiment]
name = "bundle-bench"
id = "bench"
problems = {list(PROBLEMS)!r}
agent = "simulated"
grading = "simulated"

[[models]]
name = "sim/model"

[concurrency]
sandboxes = 24
attempts_per_model = 24
"""


async def _run_experiment(path: Path) -> None:
    store = Store(path)
    engine = Engine(
        store, parse_config(CONFIG), SimulatedRunner(submissions=10), SimulatedBackend()
    )
    await engine.run()
    store.close()


def _real_sources(path: Path, pad_kb: int) -> int:
    """Replace every graded source by a real-sized one; returns how many."""
    solutions = Path("problems/solutions")
    corpus = "".join(p.read_text() for p in sorted(solutions.glob("p*.py")))
    db = open_db(path)
    rows = db.execute(
        "SELECT s.id, a.problem_id, a.dsl FROM submissions s JOIN attempts a ON a.id = s.attempt_id"
    ).fetchall()
    with immediate(db):
        for sid, pid, dsl in rows:
            found = solutions / f"{pid}_{dsl}.py"
            body = (
                found.read_text() if found.exists() else (solutions / f"p28_{dsl}.py").read_text()
            )
            text = f"# submission {sid}\n{body}"
            if pad_kb:
                start = (sid * 7919) % len(corpus)
                cycle = corpus[start:] + corpus[:start]
                text += cycle * (pad_kb * 1024 // len(cycle) + 1)
                text = text[: pad_kb * 1024]
            db.execute("UPDATE submissions SET source=? WHERE id=?", [text, sid])
    db.conn.close()
    return len(rows)


def measure(pad_kb: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "bench.sqlite"
        asyncio.run(_run_experiment(store))
        sources = _real_sources(store, pad_kb)
        out: dict[str, object] = {"graded_sources": sources, "pad_kb": pad_kb}
        for label, include_all in (("finals", False), ("all", True)):
            db = open_db(store, readonly=True)
            start = time.perf_counter()
            result = export_bundle(db, "bench", Path(tmp) / f"{label}.mkb", include_all=include_all)
            seconds = time.perf_counter() - start
            db.conn.close()
            start = time.perf_counter()
            bundle = load_bundle(result.path)
            verify_s = time.perf_counter() - start
            out[label] = {
                "attempts": len(bundle.attempts),
                "implementations": result.implementations,
                "megabytes": round(result.size_bytes / 1e6, 3),
                "export_s": round(seconds, 2),
                "verify_s": round(verify_s, 2),
            }
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--pad-kb",
        type=int,
        default=0,
        help="pad every source to this many kB (300: the contract's cap)",
    )
    args = parser.parse_args()
    print(json.dumps(measure(args.pad_kb), indent=2))


if __name__ == "__main__":
    main()
