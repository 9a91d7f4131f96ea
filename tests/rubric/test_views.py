"""Agreement, label resolution and the rubric views on a simulated experiment's database."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from engine.rubric import subjects
from engine.rubric.agreement import agreement, cohen_kappa, disagreements
from engine.rubric.labels import LabelRecord, resolve
from engine.rubric.model import default_rubric
from engine.rubric.views import (
    category_prevalence,
    failure_causes,
    report,
    uptake_by_outcome,
    uptake_lift,
)
from storage import queries, writes
from storage.db import open_db

RUBRIC = default_rubric()


def label(db, task, subject, category, value, annotator, kind="llm"):  # type: ignore[no-untyped-def]
    subject_type = {"skill": "skill", "uptake": "attempt", "cause": "comparison"}[task]
    writes.add_label(db, task=task, subject_type=subject_type, subject_id=subject,
                     category=category, value=value, annotator=annotator,
                     annotator_kind=kind)


def test_kappa_textbook_example() -> None:
    # 50 items: both yes 20, a-yes/b-no 5, a-no/b-yes 10, both no 15 -> p_o .7, p_e .5
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert cohen_kappa(a, a) == pytest.approx(1.0)
    assert cohen_kappa(["x"] * 4, ["x"] * 4) is None
    with pytest.raises(ValueError):
        cohen_kappa(["x"], [])


def test_agreement_and_disagreements(experiment_db: tuple[Path, str]) -> None:
    path, experiment = experiment_db
    db = open_db(path)
    skill_ids = [s.subject_id for s in subjects.skill_subjects(db, experiment)]
    category = "agenda handoff"
    a_vals = {s: "present" if i % 2 else "absent" for i, s in enumerate(skill_ids)}
    b_vals = {s: "present" if i % 3 else "absent" for i, s in enumerate(skill_ids)}
    for s in skill_ids:
        label(db, "skill", s, category, a_vals[s], "ann-a")
        label(db, "skill", s, category, b_vals[s], "ann-b")
    label(db, "skill", skill_ids[0], category, "present", "carol", "human")  # only one item
    [row] = [r for r in agreement(db, task="skill") if r["annotator_b"] == "ann-b"]
    # independent check from the 2x2 confusion matrix
    m = np.zeros((2, 2))
    for s in skill_ids:
        m[int(a_vals[s] == "present"), int(b_vals[s] == "present")] += 1
    n = m.sum()
    p_o = np.trace(m) / n
    p_e = (m.sum(0) * m.sum(1)).sum() / n**2
    assert row["n"] == len(skill_ids) and row["agree"] == int(np.trace(m))
    assert row["kappa"] == pytest.approx((p_o - p_e) / (1 - p_e))
    listed = disagreements(db, task="skill", category=category)
    given = {s: {a_vals[s], b_vals[s]} for s in skill_ids}
    given[skill_ids[0]].add("present")  # carol's label
    assert {d["subject_id"] for d in listed} == {s for s in skill_ids if len(given[s]) > 1}
    assert all(set(d["values"]) >= {"ann-a", "ann-b"} for d in listed)
    db.conn.close()


def test_resolution_rule() -> None:
    def rec(i: int, value: str, annotator: str, kind: str = "llm") -> LabelRecord:
        return LabelRecord("cause", "comparison", 7, "cause", value, "", annotator, kind, i)

    majority = resolve([rec(1, "x", "m1"), rec(2, "y", "m2"), rec(3, "y", "m3")])
    assert majority[("cause", 7, "cause")] == "y"
    tie = resolve([rec(1, "x", "zed"), rec(2, "y", "amy")])
    assert tie[("cause", 7, "cause")] == "y"
    human = resolve([rec(1, "y", "m2"), rec(2, "y", "m3"), rec(3, "x", "pat", "human")])
    assert human[("cause", 7, "cause")] == "x"


def test_views_match_direct_counts(experiment_db: tuple[Path, str]) -> None:
    path, experiment = experiment_db
    db = open_db(path)
    comps = queries.comparisons(db, experiment, resolved_only=True)
    # skill labels: unsupported closure present on skills with an even id
    skill_ids = [s.subject_id for s in subjects.skill_subjects(db, experiment)]
    for s in skill_ids:
        label(db, "skill", s, "unsupported closure", "present" if s % 2 == 0 else "absent", "m")
    # uptake labels: ratings cycle by attempt id; propagation yes when the id is odd
    attempts = [s.subject_id for s in subjects.uptake_subjects(db, experiment)]
    for a in attempts:
        label(db, "uptake", a, "uptake", RUBRIC.uptake_names[a % 3], "m")
        label(db, "uptake", a, "propagation", "yes" if a % 2 else "no", "m")
    # cause labels: cycle through every class and the exclusion
    harmed = [s.subject_id for s in subjects.cause_subjects(db, experiment)]
    choices = [*RUBRIC.cause_names, RUBRIC.no_failure]
    for c in harmed:
        label(db, "cause", c, "cause", choices[c % len(choices)], "m")

    prevalence = {(r["model"], r["category"]): r for r in category_prevalence(db)}
    expected: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for c in comps:
        sid = subjects.comparison_skill_id(db, c)
        if sid is not None and c.verdict in ("help", "harm"):
            expected[(c.model, c.verdict)][0] += sid % 2 == 0
            expected[(c.model, c.verdict)][1] += 1
    for (model, verdict), (k, n) in expected.items():
        row = prevalence[(model, "unsupported closure")]
        side = "helped" if verdict == "help" else "harmed"
        assert row[f"{side}_n"] == n and row[f"{side}_present"] == k
    assert all(r["helped_n"] == 0 and r["harmed_n"] == 0 for (_, cat), r in prevalence.items()
               if cat != "unsupported closure")

    uptake = {(r["model"], r["outcome"]): r for r in uptake_by_outcome(db)}
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for c in comps:
        if c.treatment_attempt_id in attempts:
            groups[(c.model, c.verdict)].append(c.treatment_attempt_id)
    assert set(uptake) == set(groups)
    for key, ids in groups.items():
        row = uptake[key]
        assert row["n"] == len(ids)
        assert row["propagation"] == pytest.approx(sum(i % 2 for i in ids) / len(ids))
        assert row["followed fully"] == pytest.approx(sum(i % 3 == 0 for i in ids) / len(ids))
        assert row["followed"] == pytest.approx(sum(i % 3 in (0, 1) for i in ids) / len(ids))

    causes = failure_causes(db)
    per_model = Counter(c.model for c in comps)
    counted: Counter[tuple[str, str]] = Counter()
    for c in comps:
        if c.id in harmed and choices[c.id % len(choices)] != RUBRIC.no_failure:
            counted[(c.model, RUBRIC.report_cause(choices[c.id % len(choices)]))] += 1
    for row in causes:
        assert row["comparisons"] == per_model[row["model"]]
        assert row["count"] == counted[(row["model"], row["cause"])]
        assert row["share_of_comparisons"] == pytest.approx(row["count"] / row["comparisons"])
    assert "rule and precision failure" in {r["cause"] for r in causes}
    assert "tolerance-edge loss" not in {r["cause"] for r in causes}

    lift = uptake_lift(db)
    cells: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for c in comps:
        if not c.skipped and c.rho is not None:
            cells[(c.model, c.family)].append((c.rho, c.treatment_attempt_id))
    assert {(r["model"], r["family"]) for r in lift["cells"]} == set(cells)
    xs, ys = [], []
    for r in lift["cells"]:
        pairs = cells[(r["model"], r["family"])]
        gm = math.exp(sum(math.log(rho) for rho, _ in pairs) / len(pairs)) - 1
        rated = [a for _, a in pairs if a in attempts]
        assert r["delta_gm"] == pytest.approx(gm)
        assert r["followed_fully"] == pytest.approx(sum(a % 3 == 0 for a in rated) / len(rated))
        xs.append(r["followed_fully"])
        ys.append(gm)
    assert lift["n_cells"] == len(xs) >= 3
    assert lift["spearman"] == pytest.approx(spearmanr(xs, ys).statistic)

    whole = report(db, experiment_id=experiment)
    assert whole["preview"] is True and whole["rubric"]["hash"] == RUBRIC.hash
    assert whole["causes"] == failure_causes(db, experiment_id=experiment)
    db.conn.close()
