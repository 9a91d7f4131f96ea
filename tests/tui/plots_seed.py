"""More history for one attempt of the fixed database (``tui_seed``), for plots and diffs:
four submissions of attempt 1 (model-a, p28, solo_cute) with real-looking sources, one of
them failing (no speedup), a final evaluation, the speed of light in their feedback, and two
versions of its SKILL.md recorded between them; timestamps pinned."""

from __future__ import annotations

from pathlib import Path

import tui_seed as seed

from storage import writes
from storage.db import open_db

SOL_MS = 0.05
KERNEL = """\
import torch
from cutlass import cute


@cute.kernel
def rmsnorm_kernel(x, w, out, eps: float):
    row = cute.arch.block_idx()[0]
    tile = {tile}
    acc = 0.0
    for i in range(0, x.shape[1], tile):
        acc += (x[row, i:i + tile] ** 2).sum()
    scale = cute.rsqrt(acc / x.shape[1] + eps)
{body}


def run(x, w, eps=1e-6):
    out = torch.empty_like(x)
    rmsnorm_kernel(x, w, out, eps).launch(grid=(x.shape[0],), block=({threads},))
    return out
"""
SOURCES = (
    KERNEL.format(tile=32, threads=128, body="    out[row] = x[row] * scale * w"),
    KERNEL.format(tile=64, threads=256, body="    out[row] = x[row] * scale * w"),
    KERNEL.format(tile=64, threads=256,
                  body="    out[row] = (x[row] * scale).to(x.dtype) * w  # [bold]fused[/]"),
)
FINAL = KERNEL.format(tile=64, threads=256, body="    out[row] = x[row] * scale * w")
SKILL_V2 = """\
# Skill model-a p28 solo_cute

- measure first
- tile size 64 with 256 threads: one row per block
- fuse the scale into the store; keep [/] literal
"""
# (submission n, source, impl ms or None when it failed), in the order they were made
HISTORY = ((1, SOURCES[0], 0.30), (2, SOURCES[1], 0.20), (3, SOURCES[2], None))
FINAL_MS = 0.25


def stamp(minute: int) -> str:
    return f"2026-01-01T10:{minute:02d}:00.000+00:00"


def enrich(path: Path) -> int:
    """Rewrite attempt 1's history in the database at ``path``; returns the attempt id."""
    first = seed.attempt_id(path, "model-a", "p28", "solo_cute")
    db = open_db(path)
    try:
        with db.atomic():
            db.execute("DELETE FROM grading_jobs WHERE submission_id IN "
                       "(SELECT id FROM submissions WHERE attempt_id=?)", [first])
            db.execute("DELETE FROM submissions WHERE attempt_id=?", [first])
            for k, source, impl in HISTORY:
                grade(db, writes.add_submission(db, first, k, source), impl,
                      "preview" if impl else "fail")
            grade(db, writes.add_submission(db, first, 1, FINAL, purpose="final"), FINAL_MS,
                  "preview")
            writes.add_skill(db, SKILL_V2, attempt_id=first)
            writes.update_attempt(db, first, speedup=1.0 / FINAL_MS, impl_median_ms=FINAL_MS,
                                  best_speedup=1.0 / 0.20, submissions_used=3)
            subs = [r[0] for r in db.execute(
                "SELECT id FROM submissions WHERE attempt_id=? ORDER BY id", [first])]
            for minute, sub in enumerate(subs, start=1):
                db.execute("UPDATE submissions SET submitted_at=?, graded_at=? WHERE id=?",
                           [stamp(minute), stamp(minute), sub])
            skills = [r[0] for r in db.execute(
                "SELECT id FROM skills WHERE attempt_id=? ORDER BY id", [first])]
            # the first version before submission 1; the second between #2 and #3
            db.execute("UPDATE skills SET created_at=? WHERE id=?", [stamp(0), skills[0]])
            db.execute("UPDATE skills SET created_at=? WHERE id=?",
                       ["2026-01-01T10:02:30.000+00:00", skills[-1]])
            db.execute("UPDATE events SET created_at=?", [stamp(0)])
            db.execute("UPDATE attempts SET updated_at=?", [stamp(0)])
    finally:
        db.conn.close()
    return first


def grade(db: object, sub: int, impl: float | None, verdict: str) -> None:
    job = writes.start_grading_job(db, sub, "simulated")  # type: ignore[arg-type]
    feedback = seed.feedback(verdict, impl, None if impl else "correctness.tolerance")
    if impl:
        feedback["sol_ms"] = SOL_MS
    writes.finish_grading_job(db, job, feedback)  # type: ignore[arg-type]
