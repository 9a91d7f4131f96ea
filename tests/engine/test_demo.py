"""`mkb demo --headless`: the real path end to end (scripted model → Terminus-2 in the local
sandbox → local CPU-preview grader → SQLite), leaving 8 attempts and both directions."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.sandbox.local_ns import namespace_support_problem
from storage import queries
from storage.db import open_db


@pytest.mark.slow
@pytest.mark.xdist_group("demo")  # shares one demo run with the bundle round trip
@pytest.mark.skipif(namespace_support_problem() is not None,
                    reason=f"local namespace sandbox unavailable: {namespace_support_problem()}")
def test_demo_headless_leaves_eight_attempts_and_both_directions(
    demo_store: tuple[Path, str],
) -> None:
    db_path, out = demo_store
    assert "PREVIEW" in out
    db = open_db(db_path, readonly=True)
    attempts = queries.attempts_for_experiment(db, "demo")
    assert len(attempts) == 8
    assert {a.arm for a in attempts} == {"solo_cute", "solo_tirx", "cute2tirx_skill",
                                         "tirx2cute_skill"}
    assert all(a.state == "finished" and a.outcome == "preview" for a in attempts)
    assert all(a.submissions_used >= 1 and a.tokens_in > 0 for a in attempts)
    assert all(queries.steps(db, a.id) for a in attempts)
    assert all(queries.latest_skill(db, a.id) for a in attempts)
    comps = queries.comparisons(db, "demo")
    assert {c.direction for c in comps} == {"cute->tirx", "tirx->cute"}
    assert len(comps) == 4 and all(c.resolved and c.rho is not None for c in comps)
    assert queries.experiment(db, "demo").preview == 1  # type: ignore[union-attr]
    treatment = next(a for a in attempts if a.arm == "cute2tirx_skill")
    assert treatment.attached_skill_id is not None and treatment.source_attempt_id is not None
    db.conn.close()
