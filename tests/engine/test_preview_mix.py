"""A store whose experiment was scored on a GPU is never resumed in CPU preview: the two kinds
of verdict would mix in one experiment (seen when a GPU store was resumed on a CPU host)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from engine.config import parse_config
from engine.convergence import PreviewMixError
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage.store import Store

CONFIG = """
[experiment]
name = "mix"
problems = ["p28"]
replicates = 1
agent = "simulated"
grading = "simulated"

[agent]
submissions = 1

[[models]]
name = "sim/a"
"""


def _counts(path: Path) -> tuple[int, int, int]:
    with sqlite3.connect(path) as db:
        return tuple(  # type: ignore[return-value]
            db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("submissions", "events", "run_locks")
        )


async def _run(path: Path, *, preview: bool) -> None:
    config = parse_config(CONFIG)
    with Store(path) as store:
        await Engine(
            store,
            config,
            SimulatedRunner(submissions=1),
            SimulatedBackend(preview=preview),
            preview=preview,
        ).run()


async def test_a_gpu_scored_experiment_is_not_resumed_in_cpu_preview(db_path: Path) -> None:
    await _run(db_path, preview=False)  # scored passes, as a GPU gives
    before = _counts(db_path)
    with pytest.raises(PreviewMixError, match="graded on a GPU"):
        await _run(db_path, preview=True)
    assert _counts(db_path) == before  # nothing written, no run lock left
    await _run(db_path, preview=False)  # a GPU host resumes it


async def test_a_preview_experiment_resumes_in_preview(db_path: Path) -> None:
    await _run(db_path, preview=True)
    await _run(db_path, preview=True)
