"""The reference-solution experiment (experiments/solutions.toml): the simulated agent's
finals are the solution files, graded by the configured backend through the real scheduler
and store."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine.config import load_config
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage import queries
from storage.store import Store

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "problems" / "solutions"
DSLS = ("cute", "tirx")


async def test_every_final_is_the_solution_file_of_its_problem_and_dsl(db_path: Path) -> None:
    config = load_config(ROOT / "experiments" / "solutions.toml")
    assert config.agent == "simulated" and config.agent_options["finals_from"]
    config_one = dataclasses.replace(config, problems=("p28",))
    seen: dict[str, str] = {}

    class Recording(SimulatedBackend):
        async def grade(self, request):  # type: ignore[no-untyped-def]
            seen[request.request_id] = request.source
            return await super().grade(request)

    runner = SimulatedRunner(**{**config.agent_options, "finals_from": str(SOLUTIONS)})
    with Store(db_path) as store:
        await Engine(store, config_one, runner, Recording()).run()
        attempts = store.read_sync(queries.attempts_for_experiment, config.id)
        assert len(attempts) == 4 and {a.state for a in attempts} == {"finished"}
        for attempt in attempts:
            final = store.read_sync(queries.implementation, attempt.id)
            assert final == (SOLUTIONS / f"p28_{attempt.dsl}.py").read_text()
    finals = {rid: src for rid, src in seen.items() if "-pair" not in rid}
    assert len(finals) == 4  # no feedback submissions: the finals alone were graded
    # paired finals (paired_repeats = 5): each comparison's arms are one reference file (A/A)
    assert config.paired_repeats == 5 and not config.paired_adaptive
    paired = [src for rid, src in seen.items() if "-pair" in rid]
    assert paired and len(paired) % 10 == 0
    assert {src for src in paired} <= {(SOLUTIONS / f"p28_{d}.py").read_text() for d in DSLS}


def test_a_missing_folder_or_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="finals_from"):
        SimulatedRunner(finals_from=str(tmp_path / "absent"))
    runner = SimulatedRunner(finals_from=str(tmp_path))
    node = type("Node", (), {"problem_id": "p28", "dsl": "cute", "is_treatment": False})()
    with pytest.raises(ValueError, match="no p28_cute.py"):
        runner._final_source("base", node, "")
