"""Sustained write throughput through the Store's writer while another connection tails events.

Writes events and trajectory steps as fast as asyncio callers can submit them (each awaited
individually by one of many concurrent producers, as the engine does), while a separate
read-only sqlite3 connection (as a second process would) tails ``events`` by id every 5 ms.
Prints events/s, steps/s, tail lag and any "database is locked" errors.

    .venv/bin/python benchmarks/storage_write.py [--seconds 5] [--producers 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from storage import writes
from storage.store import Store


def _setup(db) -> int:  # type: ignore[no-untyped-def]
    writes.create_experiment(db, "bench", "bench")
    return writes.ensure_attempt(
        db, "bench", "k", model="m", problem_id="p28", dsl="cute", arm="solo_cute"
    )


def _tail(path: Path, stop: threading.Event, stats: dict[str, float]) -> None:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    last, reads, locked = 0, 0, 0
    while not stop.is_set():
        try:
            sql = "SELECT id FROM events WHERE id > ? ORDER BY id"
            rows = conn.execute(sql, (last,)).fetchall()
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc):
                locked += 1
                continue
            raise
        if rows:
            last = rows[-1][0]
        reads += 1
        time.sleep(0.005)
    conn.close()
    stats.update(tail_reads=reads, tail_locked=locked, tail_last_id=last)


async def run(seconds: float, producers: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.sqlite"
        store = Store(path)
        attempt_id = await store.write(_setup)
        stop = threading.Event()
        stats: dict[str, float] = {}
        tailer = threading.Thread(target=_tail, args=(path, stop, stats))
        tailer.start()
        counts = {"events": 0, "steps": 0}
        deadline = time.perf_counter() + seconds

        async def producer(k: int) -> None:
            i = 0
            while time.perf_counter() < deadline:
                if i % 4 == 3:
                    await store.write(
                        writes.add_step,
                        attempt_id,
                        k * 1_000_000 + i,
                        analysis="thinking " * 20,
                        keystrokes="make\n",
                        terminal_output="ok\n" * 10,
                        try_number=1,
                    )
                    counts["steps"] += 1
                else:
                    await store.write(writes.append_event, "tick", {"k": k, "i": i})
                    counts["events"] += 1
                i += 1

        start = time.perf_counter()
        await asyncio.gather(*(producer(k) for k in range(producers)))
        elapsed = time.perf_counter() - start
        stop.set()
        tailer.join()
        store.close()
        total_events = counts["events"] + counts["steps"]  # add_step also appends an event
        return {
            "seconds": round(elapsed, 2),
            "producers": producers,
            "event_rows_per_s": round(total_events / elapsed),
            "tick_events_per_s": round(counts["events"] / elapsed),
            "steps_per_s": round(counts["steps"] / elapsed),
            "tail_reads": stats["tail_reads"],
            "database_locked_errors": stats["tail_locked"],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--producers", type=int, default=16)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.seconds, args.producers)), indent=2))


if __name__ == "__main__":
    main()
