"""A fixed database for TUI tests: two models × two problems × four arms, finished, with
feedback, trajectory steps (agent text containing markup-like brackets), skills, comparisons
and labels; timestamps pinned so renders are deterministic."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from storage import writes
from storage.db import open_db

CLOCK = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
EXPERIMENT = "tui-test"
MODELS = ("model-a", "model-b")
PROBLEMS = (("p28", "MLP & Norm"), ("p01", "Attention"))
ARMS = (("solo_cute", "cute"), ("solo_tirx", "tirx"), ("cute2tirx_skill", "tirx"),
        ("tirx2cute_skill", "cute"))
CONFIG = """\
[experiment]
name = "tui-test"
id = "tui-test"
problems = ["p28", "p01"]
agent = "simulated"
grading = "simulated"
max_submissions = 2

[[models]]
name = "model-a"

[[models]]
name = "model-b"
"""
MARKUP_ANALYSIS = "The kernel is [bold]memory bound[/bold]; closing tag [/] stays literal."
MARKUP_OUTPUT = "error: [/] unexpected\n[red]not a style[/red]"


def feedback(verdict: str, impl: float | None, reason: str | None = None) -> dict[str, object]:
    draw_ok = verdict != "fail"
    return {
        "verdict": verdict, "reason": reason, "message": "" if draw_ok else "draw 1: y",
        "device": "cpu (preview)", "import_ok": True, "import_error": None, "findings": [],
        "draws": [{"kind": "draw", "index": i, "passed": draw_ok or i == 0, "structure": "",
                   "outputs": [{"index": 0, "name": "y", "kind": "float",
                                "passed": draw_ok or i == 0,
                                "max_error": 0.0004 if (draw_ok or i == 0) else 0.5,
                                "allowance": 0.0012, "reference_error": 0.0004,
                                "max_abs_anchor": 3.0, "detail": ""}]}
                  for i in range(2)],
        "impl_median_ms": impl, "eager_median_ms": 1.0 if impl else None,
        "speedup": (1.0 / impl) if impl else None, "dsl_launches_per_call": 2.0 if impl else None,
        "bypass": "outputs_failed" if impl else None, "timings_s": {"import": 1.5},
    }


def build(path: Path, *, extra_attempts: int = 0) -> Path:
    """Write the fixed database at ``path`` (``extra_attempts`` planned rows for paging)."""
    db = open_db(path)
    with db.atomic():
        writes.create_experiment(db, EXPERIMENT, "tui-test", config_toml=CONFIG, preview=True,
                                 grading_backend="simulated")
        ids: dict[tuple[str, str, str], int] = {}
        n = 0
        for model in MODELS:
            for pid, family in PROBLEMS:
                for arm, dsl in ARMS:
                    n += 1
                    aid = writes.ensure_attempt(
                        db, EXPERIMENT, f"{model}|{pid}|r1|{arm}", model=model, problem_id=pid,
                        family=family, dsl=dsl, arm=arm, replicate=1,
                        round=0 if arm.startswith("solo") else 1)
                    ids[(model, pid, arm)] = aid
                    passed = n % 3 != 0
                    impl = 0.25 + 0.05 * n if passed else None
                    for k in (1, 2):
                        sub = writes.add_submission(db, aid, k, f"# {arm} {k}\n")
                        job = writes.start_grading_job(db, sub, "simulated")
                        writes.finish_grading_job(
                            db, job, feedback("preview" if passed or k == 1 else "fail",
                                              impl if passed or k == 1 else None,
                                              None if passed or k == 1
                                              else "correctness.tolerance"))
                    writes.update_attempt(
                        db, aid, state="finished", outcome="preview" if passed else "fail",
                        reason=None if passed else "correctness.tolerance",
                        speedup=(1.0 / impl) if impl else None, impl_median_ms=impl,
                        eager_median_ms=1.0 if impl else None, tries=1,
                        started_at="2026-01-01T11:00:00+00:00",
                        ended_at=f"2026-01-01T11:{10 + n:02d}:30+00:00")
                    writes.add_skill(db, f"# Skill {model} {pid} {arm}\n\n- measure first\n"
                                         f"- tile size {16 * (n % 4 + 1)}\n- keep [/] literal\n",
                                     attempt_id=aid)
        first = ids[("model-a", "p28", "solo_cute")]
        for i, (analysis, output) in enumerate(((MARKUP_ANALYSIS, MARKUP_OUTPUT),
                                                ("Second turn: profile.", "ok 1.2 ms"))):
            writes.add_step(db, first, i, analysis=analysis, plan="1. write kernel\n2. submit",
                            keystrokes="python submit.py\n", terminal_output=output)
        for model in MODELS:
            for pid, family in PROBLEMS:
                for direction, src, base, treat in (
                    ("cute->tirx", "solo_cute", "solo_tirx", "cute2tirx_skill"),
                    ("tirx->cute", "solo_tirx", "solo_cute", "tirx2cute_skill"),
                ):
                    t = ids[(model, pid, treat)]
                    rho = 0.8 + 0.1 * (t % 5)
                    writes.upsert_comparison(
                        db, EXPERIMENT, model=model, problem_id=pid, family=family,
                        direction=direction, replicate=1, round=1,
                        source_attempt_id=ids[(model, pid, src)],
                        baseline_attempt_id=ids[(model, pid, base)], treatment_attempt_id=t,
                        resolved=1, skipped=0, rho=rho,
                        verdict="help" if rho > 1 else "harm" if rho < 1 else "neutral")
                    db.execute("UPDATE attempts SET attached_skill_id=(SELECT id FROM skills "
                               "WHERE attempt_id=?), source_attempt_id=? WHERE id=?",
                               [ids[(model, pid, src)], ids[(model, pid, src)], t])
        writes.add_label(db, task="skill", subject_type="skill", subject_id=1,
                         category="measured evidence", value="present",
                         evidence="tile size [16] measured", annotator="llm-1",
                         annotator_kind="llm")
        running = writes.ensure_attempt(db, EXPERIMENT, "model-b|p28|r2|solo_cute",
                                        model="model-b", problem_id="p28", family="MLP & Norm",
                                        dsl="cute", arm="solo_cute", replicate=2)
        writes.update_attempt(db, running, state="running", tries=1, submissions_used=1,
                              started_at="2026-01-01T11:50:00+00:00")
        for i in range(extra_attempts):
            writes.ensure_attempt(db, EXPERIMENT, f"extra|{i}", model=f"model-{i % 7}",
                                  problem_id=f"p{i % 74 + 1:02d}", family="Attention",
                                  dsl="cute" if i % 2 else "tirx", arm="solo_cute",
                                  replicate=i + 1)
        stamp = "2026-01-01T10:00:00.000+00:00"
        for table in ("experiments", "attempts"):
            db.execute(f"UPDATE {table} SET created_at=?, updated_at=?", [stamp, stamp])
        for table, column in (("skills", "created_at"), ("labels", "created_at"),
                              ("trajectory_steps", "created_at"), ("events", "created_at"),
                              ("comparisons", "updated_at")):
            db.execute(f"UPDATE {table} SET {column}=?", [stamp])
        db.execute("UPDATE submissions SET submitted_at=?, graded_at=?", [stamp, stamp])
    db.conn.close()
    return path


def attempt_id(path: Path, model: str, problem: str, arm: str) -> int:
    db = open_db(path)
    try:
        row = db.execute("SELECT id FROM attempts WHERE plan_key=?",
                         [f"{model}|{problem}|r1|{arm}"]).fetchone()
        return int(row[0])
    finally:
        db.conn.close()


def dump(value: object) -> str:
    return json.dumps(value)


BAD_RUNTIMES = (0.0, -1.0, float("nan"), float("inf"), None)  # NaN is stored as NULL by SQLite


def add_bad_timings(path: Path) -> dict[str, int]:
    """Break the seeded store's timings as a faulty grader would have left them: the first
    five passing attempts' finals get each of :data:`BAD_RUNTIMES`, and every other passing
    attempt a series of repeated finals holding two good runtimes and each bad one. Returns
    what the analysis must leave out: ``{"attempts": n, "repeats": n}``."""
    from storage import repeats as repeat_rows

    db = open_db(path)
    with db.atomic():
        rows = db.execute(
            "SELECT id, problem_id, dsl, impl_median_ms FROM attempts "
            "WHERE experiment_id=? AND outcome='preview' ORDER BY id",
            [EXPERIMENT],
        ).fetchall()
        for (aid, *_), bad in zip(rows, BAD_RUNTIMES, strict=False):
            db.execute("UPDATE attempts SET impl_median_ms=? WHERE id=?", [bad, aid])
        for aid, problem, dsl, impl in rows[len(BAD_RUNTIMES):]:
            for k, value in enumerate((impl, impl * 1.01, *BAD_RUNTIMES), start=1):
                repeat_rows.record_repeat(
                    db, repeat_rows.final_series(aid, 1), k,
                    {"verdict": "preview", "impl_median_ms": value, "eager_median_ms": 1.0},
                    kind="final", problem_id=problem, dsl=dsl, source=f"# {aid}",
                    host="seed-host", experiment_id=EXPERIMENT, attempt_id=aid)
    db.conn.close()
    kept = max(0, len(rows) - len(BAD_RUNTIMES))
    return {"attempts": min(len(rows), len(BAD_RUNTIMES)), "repeats": kept * len(BAD_RUNTIMES)}
