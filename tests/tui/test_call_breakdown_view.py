"""The feedback tab shows where a call's time goes: host / device / e2e µs per side."""

from __future__ import annotations

import math
from pathlib import Path

import tui_seed as seed
from conftest import plain, wait_until
from textual.widgets import Static

from screens.attempt_detail import AttemptDetailScreen
from screens.render import breakdown_text
from storage import writes
from storage.store import Store

SPLIT = {
    "source": "runner",
    "submission": {"host_ms": 0.066, "device_ms": 0.258, "e2e_ms": 0.321},
    "eager": {"host_ms": 0.0195, "device_ms": None, "e2e_ms": 0.124},
}


def test_breakdown_line_formats_microseconds_and_dashes_garbage() -> None:
    line = plain(breakdown_text({"clock": {"breakdown": SPLIT}}))
    assert "host / device / e2e µs: submission 66.0 / 258.0 / 321.0" in line
    assert "eager 19.5 / - / 124.0" in line and "not scored" in line
    junk = {"submission": {"host_ms": "1", "device_ms": math.nan, "e2e_ms": True}}
    assert "submission - / - / -" in plain(breakdown_text({"clock": {"breakdown": junk}}))
    empty: list[dict[str, object]] = [{}, {"clock": []}, {"clock": {"breakdown": "x"}}, {}]
    for feedback in empty:
        assert breakdown_text(feedback) is None
    assert "warm call" not in line
    warm = {"clock": {"breakdown": SPLIT, "warm_calls": {"submission": 60, "eager": 59}}}
    assert "each timed call after an untimed warm call" in plain(breakdown_text(warm))


async def test_feedback_tab_shows_the_split(make_app, seeded_db: Path) -> None:
    attempt = seed.attempt_id(seeded_db, "model-a", "p28", "solo_tirx")
    feedback = {**seed.feedback("preview", 0.3), "clock": {"breakdown": SPLIT}}
    store = Store(seeded_db)
    try:
        sub = store.write_sync(writes.add_submission, attempt, 3, "# third\n")
        job = store.write_sync(writes.start_grading_job, sub, "simulated")
        store.write_sync(writes.finish_grading_job, job, feedback)
    finally:
        store.close()
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        app.open_attempt(attempt)
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptDetailScreen)
                         and app.screen.row is not None)
        await pilot.press("f")
        screen = app.screen
        text = plain(screen.query_one("#submissions", Static))
        assert "submission 66.0 / 258.0 / 321.0 · eager 19.5 / - / 124.0" in text
        assert text.count("host / device / e2e µs") == 1  # the seeded feedback has no split
