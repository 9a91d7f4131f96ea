"""TUI responsiveness under load: 10,000 attempts, ~500 events/s from another writer,
while a user pages, filters and moves the cursor.

Runs the real App headless (Textual's test driver renders every frame without a terminal)
attached read-only to a database that a writer thread updates, as a separate engine process
would. Reports key-to-update latency (median / p95 / max), event-loop lag, the number of
coalesced redraws and the UI thread's CPU time per second.

    .venv/bin/python benchmarks/tui_responsiveness.py [--attempts 10000] [--rate 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storage import writes  # noqa: E402
from storage.db import open_db  # noqa: E402
from storage.store import Store  # noqa: E402

MODELS = [f"model-{i}" for i in range(8)]
ARMS = ("solo_cute", "solo_tirx", "cute2tirx_skill", "tirx2cute_skill")
STATES = ("planned", "queued", "running", "finished", "failed")


def build(path: Path, attempts: int) -> None:
    db = open_db(path)
    with db.atomic():
        writes.create_experiment(db, "bench", "bench", preview=True)
        rows = []
        for i in range(attempts):
            arm = ARMS[i % 4]
            rows.append({
                "experiment_id": "bench", "plan_key": f"k{i}", "model": MODELS[i % 8],
                "problem_id": f"p{i % 74 + 1:02d}", "family": "Attention",
                "dsl": "cute" if arm in ("solo_cute", "tirx2cute_skill") else "tirx",
                "arm": arm, "replicate": i // 2368 + 1, "state": STATES[i % 5],
                "best_speedup": (i % 97) / 10 or None, "submissions_used": i % 11,
                "started_at": "2026-01-01T11:00:00+00:00",
                "created_at": "2026-01-01T10:00:00+00:00",
                "updated_at": "2026-01-01T10:00:00+00:00",
            })
        db.table("attempts").insert_all(rows, batch_size=2000)
    db.conn.close()


def write_events(path: str, attempts: int, rate: int, stop: Any, written: Any) -> None:
    """Another process (as the engine would be): ``rate`` attempt updates per second."""
    store = Store(path)
    rng = random.Random(1)
    tick = 0.02
    per_tick = max(1, round(rate * tick))
    next_at = time.monotonic()
    while not stop.is_set():
        futures = [store.submit_write(
            writes.update_attempt, rng.randint(1, attempts), "attempt_progress",
            submissions_used=rng.randint(0, 10), best_speedup=rng.random() * 5)
            for _ in range(per_tick)]
        for f in futures:
            f.result()
        with written.get_lock():
            written.value += per_tick
        next_at += tick
        time.sleep(max(0.0, next_at - time.monotonic()))
    store.close()


SETTLE_S = 0.1  # a user's pause between keys: each figure excludes the previous one's paint
KEY_CHARACTERS = {"right_square_bracket": "]", "left_square_bracket": "[", "down": None}


async def timed(pilot: Any, key: str | None, action: Callable[[], None] | None,
                done: Callable[[], bool], timeout: float = 10.0) -> float:
    """Milliseconds from a key (posted as the driver would) or action until ``done()``.

    ``pilot.press`` waits for the app to go idle, which never happens under a steady event
    stream, so keys are posted to the App's queue directly instead.
    """
    from textual import events

    start = time.perf_counter()
    if key:
        pilot.app.post_message(events.Key(key, KEY_CHARACTERS[key]))
    if action:
        action()
    while not done():
        if time.perf_counter() - start > timeout:
            raise TimeoutError(key or "action")
        await asyncio.sleep(0.002)
    return (time.perf_counter() - start) * 1000


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"n": len(values), "median_ms": round(statistics.median(ordered), 1),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
            "max_ms": round(ordered[-1], 1)}


async def measure(path: Path, attempts: int, rate: int, rounds: int) -> dict[str, Any]:
    from app.tui import MkbApp
    from screens.attempts import AttemptsScreen

    app = MkbApp(path, attach=True, theme="textual-dark")
    ctx = multiprocessing.get_context("spawn")
    stop, written = ctx.Event(), ctx.Value("i", 0)
    writer = ctx.Process(target=write_events, args=(str(path), attempts, rate, stop, written))
    lags: list[float] = []
    results: dict[str, Any] = {}
    launched = time.perf_counter()
    async with app.run_test(size=(160, 50)) as pilot:
        screen = app.screen
        assert isinstance(screen, AttemptsScreen)
        t0 = time.perf_counter()
        while screen.total != attempts:
            await asyncio.sleep(0.002)
        results["first_page_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        results["startup_to_first_page_ms"] = round((time.perf_counter() - launched) * 1000)
        if rate > 0:
            writer.start()

        async def lag_probe() -> None:
            while True:
                before = time.perf_counter()
                await asyncio.sleep(0.01)
                lags.append((time.perf_counter() - before - 0.01) * 1000)

        probe = asyncio.create_task(lag_probe())
        table = screen.table
        redraws_before = app.redraws
        started, ui_cpu = time.perf_counter(), time.thread_time()  # the UI loop's thread
        paging, cursor, filtering = [], [], []
        for i in range(rounds):
            key = "right_square_bracket" if i % 2 == 0 else "left_square_bracket"
            want = 101 if i % 2 == 0 else 1
            paging.append(await timed(pilot, key, None,
                                      lambda w=want: bool(screen.rows)
                                      and screen.rows[0].id == w))
            await asyncio.sleep(SETTLE_S)
            row = table.cursor_row
            cursor.append(await timed(pilot, "down", None,
                                      lambda r=row: table.cursor_row == r + 1))
            await asyncio.sleep(SETTLE_S)
            model = MODELS[i % 8]
            filtering.append(await timed(
                pilot, None, lambda m=model: screen.set_filter(f"model:{m}"),
                lambda m=model: bool(screen.rows) and all(r.model == m for r in screen.rows)
                and screen.filter_text == f"model:{m}"))
            screen.set_filter("")
            while screen.filter_text or screen.total != attempts:
                await asyncio.sleep(0.002)
            await asyncio.sleep(SETTLE_S)
        elapsed = time.perf_counter() - started
        ui_cpu = time.thread_time() - ui_cpu
        probe.cancel()
        stop.set()
        if rate > 0:
            writer.join()
        results.update({
            "attempts": attempts,
            "target_events_per_s": rate,
            "events_per_s": round(written.value / elapsed),
            "page_key_to_update": summary(paging),
            "cursor_key_to_update": summary(cursor),
            "filter_to_update": summary(filtering),
            "event_loop_lag": summary(lags),
            "redraws_per_s": round((app.redraws - redraws_before) / elapsed, 1),
            # CPU time of the UI loop's thread per second (other load hardly changes it)
            "ui_thread_cpu_ms_per_s": round(ui_cpu / elapsed * 1000),
            "seconds": round(elapsed, 1),
        })
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=500, help="events per second")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.sqlite"
        build(path, args.attempts)
        print(json.dumps(asyncio.run(measure(path, args.attempts, args.rate, args.rounds)),
                         indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
