"""Experiment config validation and the plan (four arms, transfer graph)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import ConfigError, parse_config
from engine.plan import build_plan

BASIC = """
[experiment]
name = "t"
problems = ["p28"]
replicates = 2

[[models]]
name = "scripted/a"

[[models]]
name = "scripted/b"
"""


def test_four_arms_per_model_problem_replicate() -> None:
    plan = build_plan(parse_config(BASIC))
    assert plan.counts() == {
        "solo_cute": 4, "solo_tirx": 4, "cute2tirx_skill": 4, "tirx2cute_skill": 4,
    }
    assert len(plan.comparisons) == 8
    c = next(c for c in plan.comparisons if c.direction == "cute->tirx" and c.replicate == 2
             and c.model == "scripted/a")
    assert c.source_key == "scripted/a|p28|r2|solo_cute"
    assert c.baseline_key == "scripted/a|p28|r2|solo_tirx"
    assert c.treatment_key == "scripted/a|p28|r2|cute2tirx_skill"
    assert plan.node(c.treatment_key).dsl == "tirx"


def test_single_dsl_plans_only_solos() -> None:
    plan = build_plan(parse_config(BASIC.replace('replicates = 2', 'dsls = ["cute"]')))
    assert plan.counts() == {"solo_cute": 2} and plan.comparisons == ()


def test_transfer_graph_cross_model_chain_and_edited_skill(tmp_path: Path) -> None:
    skill = tmp_path / "edited.md"
    skill.write_text("Keep the reduction in one pass over each row.")
    text = BASIC.replace("replicates = 2", "replicates = 1") + f"""
[[transfers]]
kind = "cross_model"
source_model = "scripted/a"
target_model = "scripted/b"

[[transfers]]
kind = "chain"
rounds = 2

[[transfers]]
kind = "edited_skill"
model = "scripted/a"
problem = "p28"
direction = "tirx->cute"
skill_file = "{skill}"
"""
    plan = build_plan(parse_config(text, str(tmp_path / "x.toml")))
    keys = {n.key for n in plan.nodes}
    assert "scripted/b|p28|r1|cute2tirx_skill|from:scripted/a" in keys
    cross = plan.node("scripted/b|p28|r1|cute2tirx_skill|from:scripted/a")
    assert cross.source_key == "scripted/a|p28|r1|solo_cute"
    round2 = plan.node("scripted/a|p28|r1|cute2tirx_skill|round2")
    assert round2.source_key == "scripted/a|p28|r1|tirx2cute_skill"
    edited = [n for n in plan.nodes if n.edited_skill]
    assert len(edited) == 1 and edited[0].dsl == "cute"
    assert edited[0].edited_skill == skill.read_text()
    variants = {c.variant for c in plan.comparisons}
    assert "from:scripted/a" in variants and any(v.startswith("edited:") for v in variants)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not toml [", "not valid TOML"),
        ("[experiment]\nname='x'\n", "at least one [[models]]"),
        (BASIC + "\n[bogus]\n", "unknown sections"),
        (BASIC.replace('problems = ["p28"]', 'problems = ["p99"]'), "unknown problem"),
        (BASIC.replace("replicates = 2", "replicates = 0"), "replicates"),
        (BASIC.replace("replicates = 2", 'dsls = ["cuda"]'), "unknown DSLs"),
        (BASIC.replace("replicates = 2", 'grading = "gpu-farm"'), "grading"),
        (BASIC.replace("replicates = 2", "budget_minutes = -1"), "budget_minutes"),
        (BASIC.replace('name = "scripted/b"', 'name = "scripted/a"'), "distinct"),
        (BASIC + '\n[[transfers]]\nkind = "cross_model"\nsource_model = "a"\n'
         'target_model = "scripted/b"\n', "source_model"),
        (BASIC + '\n[[transfers]]\nkind = "chain"\nrounds = 1\n', "at least 2 rounds"),
        (BASIC + '\n[[transfers]]\nkind = "edited_skill"\nproblem = "p28"\n'
         'direction = "cute->tirx"\nskill_text = "  "\n', "blank"),
        (BASIC + "\n[concurrency]\nsandboxes = 0\n", "sandboxes"),
        (BASIC + '\n[grading]\nkernel_audit = "strict"\n', "[grading].kernel_audit"),
        (BASIC.replace("replicates = 2", 'grading = "http"') + '\n[grading]\n'
         'kernel_audit = "enforce"\n', "mkb grader serve --kernel-audit"),
        (BASIC + '\n[grading]\nwarm_calls = "yes"\n', "[grading].warm_calls"),
        (BASIC.replace("replicates = 2", 'grading = "http"') + '\n[grading]\n'
         'warm_calls = true\n', "mkb grader serve --warm-calls"),
    ],
)
def test_invalid_configs_get_clear_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        parse_config(text, "exp.toml")


def test_run_refuses_a_config_whose_environment_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import main

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    config = tmp_path / "docker.toml"
    config.write_text(BASIC.replace('replicates = 2', 'sandbox = "docker"'))
    db = tmp_path / "x.sqlite"
    assert main(["run", str(config), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "cannot run here" in err and "docker" in err
    assert not db.exists()  # refused before anything started


def test_kernel_audit_reaches_the_local_grader() -> None:
    from engine.factory import make_backend

    config = parse_config(BASIC + '\n[grading]\nkernel_audit = "enforce"\ngpus = "none"\n',
                          "exp.toml")
    backend = make_backend(config)
    assert backend.config.kernel_audit == "enforce"  # type: ignore[attr-defined]


def test_warm_calls_reach_the_local_grader() -> None:
    from engine.factory import make_backend

    text = BASIC + '\n[grading]\nwarm_calls = true\ngpus = "none"\n'
    assert make_backend(parse_config(text, "exp.toml")).config.warm_calls  # type: ignore[attr-defined]
    plain = parse_config(BASIC + '\n[grading]\ngpus = "none"\n', "exp.toml")
    assert not make_backend(plain).config.warm_calls  # type: ignore[attr-defined]
