"""Annotation runs against the scripted OpenAI-compatible server, through litellm."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from engine.rubric.annotate import Annotator, annotate
from engine.rubric.model import default_rubric
from engine.standins.scripted_llm import SCENARIO_DIR, Scenario, ScriptedLLMServer
from storage import queries
from storage.store import Store

ANNOTATOR_DIR = SCENARIO_DIR / "annotators"


def server(*names: str) -> ScriptedLLMServer:
    scenarios = [Scenario.load(ANNOTATOR_DIR / f"{name}.toml") for name in names]
    return ScriptedLLMServer({s.name: s for s in scenarios})


def failures(store: Store) -> list[dict[str, object]]:
    return [e.payload for e in store.read_sync(queries.events_after, 0, limit=100_000)
            if e.kind == "annotation_failed"]


@pytest.mark.slow
async def test_skill_labels_from_two_annotators(experiment_db: tuple[Path, str]) -> None:
    path, experiment = experiment_db
    rubric = default_rubric()
    async with server("skill_a", "skill_b") as llm:
        annotators = [Annotator("openai/ann-skill-a", llm.base_url, "k"),
                      Annotator("openai/ann-skill-b", llm.base_url, "k")]
        with Store(path) as store:
            summary = await annotate(store, annotators, tasks=["skill"],
                                     experiment_id=experiment, concurrency=3)
            labels = store.read_sync(queries.labels, task="skill")
    skills = {label.subject_id for label in labels}
    assert summary.failed == 0 and summary.done == 2 * len(skills) > 0
    assert len(labels) == 2 * len(skills) * len(rubric.categories)
    values = {(label.annotator, label.category, label.value) for label in labels}
    assert ("openai/ann-skill-a", "verified reformulation", "present") in values
    assert ("openai/ann-skill-b", "verified reformulation", "absent") in values
    assert all(label.annotator_kind == "llm" for label in labels)
    # annotator B needed three tries per skill: two rejected replies were sent back to it
    retried = [r for r in llm.requests if r.scenario == "ann-skill-b"]
    assert Counter(r.turn_index for r in retried) == {0: len(skills), 1: len(skills),
                                                     2: len(skills)}
    assert any("lacks categories" in r.last_user_message for r in retried)
    assert any("not a verbatim quote" in r.last_user_message for r in retried)
    with Store(path) as store:
        stored = store.read_sync(lambda db: db.execute(
            "SELECT raw_reply, rubric_hash, sum(tokens_in), sum(tokens_out) FROM labels "
            "WHERE annotator='openai/ann-skill-b' GROUP BY subject_id").fetchall())
    for raw, rubric_hash, tokens_in, tokens_out in stored:
        assert raw.startswith("```json") and rubric_hash == rubric.hash
        assert tokens_in > 0 and tokens_out > 0


async def test_rerun_skips_labelled_items(experiment_db: tuple[Path, str]) -> None:
    path, experiment = experiment_db
    async with server("skill_a") as llm:
        annotators = [Annotator("openai/ann-skill-a", llm.base_url, "k")]
        with Store(path) as store:
            first = await annotate(store, annotators, tasks=["skill"], experiment_id=experiment)
            calls = len(llm.requests)
            again = await annotate(store, annotators, tasks=["skill"], experiment_id=experiment)
            assert again.done == 0 and again.skipped == first.done > 0
            assert len(llm.requests) == calls
            forced = await annotate(store, annotators, tasks=["skill"],
                                    experiment_id=experiment, force=True)
            assert forced.done == first.done and len(llm.requests) == 2 * calls


@pytest.mark.slow
async def test_refusals_and_errors_are_recorded_not_fatal(
        experiment_db: tuple[Path, str]) -> None:
    path, experiment = experiment_db
    async with server("refuse", "server_error", "cause") as llm:
        annotators = [Annotator("openai/ann-refuse", llm.base_url, "k"),
                      Annotator("openai/ann-error", llm.base_url, "k"),
                      Annotator("openai/ann-cause", llm.base_url, "k")]
        with Store(path) as store:
            summary = await annotate(store, annotators, tasks=["cause"],
                                     experiment_id=experiment)
            recorded = failures(store)
            labels = store.read_sync(queries.labels, task="cause")
    harmed = summary.done
    assert harmed > 0 and summary.failed == 2 * harmed
    refused = [f for f in recorded if f["annotator"] == "openai/ann-refuse"]
    errored = [f for f in recorded if f["annotator"] == "openai/ann-error"]
    assert len(refused) == len(errored) == harmed
    assert all(len(f["raw_replies"]) == 3 and "sorry" in f["raw_replies"][0] for f in refused)
    assert all(f["raw_replies"] == [] and "call failed" in f["error"] for f in errored)
    assert sum(r.scenario == "ann-error" for r in llm.requests) == 3 * harmed
    # precedence: toolchain friction outranks search truncation
    assert {(label.annotator, label.value) for label in labels} == {
        ("openai/ann-cause", "toolchain friction")}


async def test_uptake_and_propagation(experiment_db: tuple[Path, str]) -> None:
    path, experiment = experiment_db
    async with server("uptake") as llm:
        with Store(path) as store:
            summary = await annotate(store, [Annotator("openai/ann-uptake", llm.base_url, "k")],
                                     tasks=["uptake"], experiment_id=experiment)
            labels = store.read_sync(queries.labels, task="uptake")
            own_skill = {a: bool(s and s.text.strip()) for a in {x.subject_id for x in labels}
                         for s in [store.read_sync(queries.latest_skill, a)]}
            prompts = [r.last_user_message for r in llm.requests]
    assert summary.failed == 0 and summary.done == len(own_skill) > 0
    for label in labels:
        if label.category == "uptake":
            assert label.value == "followed partially"
        else:
            assert label.value == ("yes" if own_skill[label.subject_id] else "no")
    assert any("SOURCE SKILL" in p and "Skill from" in p for p in prompts)
