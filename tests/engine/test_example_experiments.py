"""The experiment files shipped in experiments/ parse, plan as documented, and name what a
run would need."""

from __future__ import annotations

from pathlib import Path

from engine.config import load_config
from engine.plan import build_plan
from problems import registry

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def test_pilot_is_one_problem_per_family_with_four_arms() -> None:
    config = load_config(EXPERIMENTS / "pilot.toml")
    plan = build_plan(config)
    assert len(plan.nodes) == 24 and len(plan.comparisons) == 12
    families = {registry.get(pid).family for pid in config.problems}
    assert len(families) == 6 and config.sandbox == "local" and config.grading == "local"


def test_paper_scale_is_six_models_times_the_catalog() -> None:
    config = load_config(EXPERIMENTS / "paper.toml")
    plan = build_plan(config)
    assert len(config.models) == 6 and len({n.problem_id for n in plan.nodes}) == 74
    assert len(plan.nodes) == 1776 and len(plan.comparisons) == 888  # 6 × 74 × 2 directions
    assert config.grading == "http" and config.concurrency.llm_calls_per_model == 8
