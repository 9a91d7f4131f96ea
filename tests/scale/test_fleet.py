"""Fleet test: three real grading services on loopback, one SIGKILLed mid-run.

Four scripted attempts (1 replicate × 4 arms of p28) go through the real scheduler,
store and http client pool; each submits one real implementation for feedback and one for
the final evaluation (CPU preview). After a quarter of the gradings, grader 0 is killed while
it holds work. Every submission must still be graded exactly once, the lost evaluations must
show up as retried grading jobs, and no attempt may be lost.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.fleet_throughput import run_fleet  # noqa: E402
from storage import queries  # noqa: E402
from storage.store import Store  # noqa: E402

REPLICATES = 1  # 8 gradings; each CPU-preview grading costs 2-5 s of CPU (a runner's start)
SUBMISSIONS = 1
ATTEMPTS = 4 * REPLICATES
GRADINGS = ATTEMPTS * (SUBMISSIONS + 1)


@pytest.mark.slow
async def test_fleet_survives_a_killed_grader(tmp_path: Path) -> None:
    db = tmp_path / "fleet.sqlite"
    result = await run_fleet(
        db, graders=3, replicates=REPLICATES, submissions=SUBMISSIONS, sandboxes=6, kill_after=0.25
    )
    print(result)  # throughput figures for docs/scaling.md (pytest -s)
    assert result.killed_after_done is not None, "grader 0 was never killed"
    assert result.killed_after_done < GRADINGS

    with Store(db) as store:
        attempts = store.read_sync(queries.attempts_for_experiment, result.experiment_id)
        subs = store.read_sync(
            lambda d: d.execute(
                "SELECT s.id, s.attempt_id, s.purpose, s.n, s.state, s.verdict,"
                " (SELECT count(*) FROM grading_jobs g WHERE g.submission_id = s.id"
                "  AND g.state = 'done'),"
                " (SELECT count(*) FROM grading_jobs g WHERE g.submission_id = s.id)"
                " FROM submissions s"
            ).fetchall()
        )
        error_jobs = store.read_sync(
            lambda d: d.execute(
                "SELECT g.submission_id, g.error FROM grading_jobs g WHERE g.state = 'error'"
            ).fetchall()
        )

    # no attempt lost: every planned attempt finished on its first try
    assert len(attempts) == ATTEMPTS
    assert {a.state for a in attempts} == {"finished"}
    assert {a.outcome for a in attempts} == {"preview"}
    assert all(a.tries == 1 for a in attempts)

    # every submission graded exactly once, with a real verdict
    assert len(subs) == GRADINGS
    assert len({(a, p, n) for _, a, p, n, *_ in subs}) == GRADINGS
    for sub_id, _, _, _, state, verdict, done_jobs, _ in subs:
        assert (state, verdict, done_jobs) == ("done", "preview", 1), sub_id
    per_attempt: dict[int, list[str]] = {}
    for _, attempt_id, purpose, *_ in subs:
        per_attempt.setdefault(attempt_id, []).append(purpose)
    assert all(sorted(p) == ["final", "submission"] for p in per_attempt.values())

    # the killed grader's work was retried elsewhere, and the retries are on record
    assert error_jobs, "killing a busy grader should have failed at least one grading job"
    retried = {sub_id for sub_id, _ in error_jobs}
    assert all(jobs >= 2 for sub_id, *_, jobs in subs if sub_id in retried)
    assert result.retried_submissions == len(retried)
    assert result.gradings == GRADINGS
    assert 0.0 < result.mean_utilisation <= 1.0
