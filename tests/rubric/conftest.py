"""A small simulated experiment (real scheduler and store) as the database to annotate."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

CONFIG = """
[experiment]
name = "rubric"
problems = ["p28", "p01"]
replicates = 3

[[models]]
name = "sim/a"

[[models]]
name = "sim/b"

[concurrency]
sandboxes = 4
attempts_per_model = 4
"""


def _build(path: Path) -> str:
    from engine.config import parse_config
    from engine.scheduler import Engine
    from engine.standins.simulated import SimulatedBackend, SimulatedRunner
    from storage.store import Store

    config = parse_config(CONFIG)

    async def run() -> None:
        with Store(path) as store:
            await Engine(store, config, SimulatedRunner(submissions=2), SimulatedBackend()).run()

    asyncio.run(run())
    return config.id


@pytest.fixture(scope="session")
def built_experiment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("rubric-db") / "base.sqlite"
    experiment_id = _build(path)
    return path, experiment_id


@pytest.fixture
def experiment_db(built_experiment: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    """A fresh copy of the simulated experiment's database for one test."""
    src, experiment_id = built_experiment
    dst = tmp_path / "exp.sqlite"
    shutil.copy(src, dst)
    for suffix in ("-wal", "-shm"):
        if Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", f"{dst}{suffix}")
    return dst, experiment_id
