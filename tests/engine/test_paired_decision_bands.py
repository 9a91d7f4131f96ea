"""The bands an adaptive paired job's sequential rule reads (engine/paired_repeats.py,
``decision_bands``), from a real SQLite store: both arms' bands of (problem, DSL, host) with
the job's own rows left out, and the provisional band of the futility stop (the problem and
DSL pooled over every host, the job's own arms included)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from engine.paired_repeats import PairJob, decision_bands
from storage import writes
from storage.db import open_db

Z = (-1.0, 0.5, 1.2, -0.7)  # a fixed pattern of log-runtime deviations


def _rows(db: Any, series: str, dsl: str, host: str, sigma: float, pair: str | None) -> None:
    for i, z in enumerate(Z, 1):
        db.execute(
            "INSERT INTO timing_repeats (series, repeat, kind, experiment_id, problem_id, dsl, "
            "host, source_hash, state, verdict, impl_median_ms, started_at, pair_key) "
            "VALUES (?, ?, 'final', 'e', 'p01', ?, ?, 'x', 'done', 'pass', ?, 'now', ?)",
            [series, i, dsl, host, math.exp(sigma * z), pair],
        )


def _sigma(sigma: float) -> float:
    """The pooled SD of one series of the pattern Z at scale σ."""
    mean = sum(Z) / len(Z)
    return sigma * math.sqrt(sum((z - mean) ** 2 for z in Z) / (len(Z) - 1))


@pytest.fixture
def db(db_path: Path) -> Any:
    db = open_db(db_path)
    writes.create_experiment(db, "e", "e")
    yield db
    db.conn.close()


def test_both_arms_bands_on_the_host_and_a_provisional_one_for_futility(db: Any) -> None:
    job = PairJob(
        1, "pair:e:1", "p01", {"baseline": (1, "cute", "a"), "treatment": (2, "tirx", "b")}
    )
    for i in range(2):  # other files on host A: a band per DSL (cute quiet, tirx noisy)
        _rows(db, f"final:{i}:cute", "cute", "hA", 0.02, None)
        _rows(db, f"final:{i}:tirx", "tirx", "hA", 0.20, None)
    _rows(db, "pair:e:1:baseline", "cute", "hB", 0.02, "pair:e:1")  # the job's own, on host B
    _rows(db, "pair:e:1:treatment", "tirx", "hB", 0.20, "pair:e:1")
    (sigma, dof), _ = decision_bands(db, "e", job, "hA")
    assert sigma == pytest.approx(math.sqrt((_sigma(0.02) ** 2 + _sigma(0.20) ** 2) / 2))
    assert dof == 6  # each DSL's two series of 4 on host A
    (none, zero), (loose, loose_dof) = decision_bands(db, "e", job, "hB")
    assert (none, zero) == (None, 0)  # host B has only the job's own rows: no band for a test
    assert loose == pytest.approx(sigma) and loose_dof == 9  # both hosts, the job's arms in
