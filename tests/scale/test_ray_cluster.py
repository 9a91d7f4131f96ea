"""Grading on a local Ray cluster (a head and 3 worker nodes on loopback, one GPU each, token
authentication on) through the real scheduler, store and ray backend.

1. Real CPU-preview gradings: one grader actor holding the local backend's warm slot grades a
   real p28 implementation (judge, jailed runner) for 12 submissions; the actor is SIGKILLed
   mid-run. Every submission has exactly one stored result, the job it held is graded again
   on the restarted actor, and nothing the actor started (warm parent, judges, runners, the
   jail) outlives it.
2. Paired finals: each comparison's paired job (A B B A …) graded on one grader actor of the
   four, while the other work spreads over all of them.
3. Faults at scale: 200 simulated gradings (0.1–0.5 s each) on four grader actors, first
   without faults, then with one actor SIGKILLed at 30 % and one worker node removed at 60 %:
   every job has exactly one stored result, duplicates are counted, recorded and dropped, and
   the run takes under 1.5× the fault-free one.

The whole module (cluster start included) stays under 3 minutes, and the memory it adds under
3 GB (the peak of the summed proportional memory of this process and everything under it,
less this process's own before the cluster started).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("ray") is None:  # found, not imported: auth is set up first
    pytest.skip("the ray extra is not installed (pip install -e '.[ray]')", allow_module_level=True)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.fleet_throughput import ScriptedRunner  # noqa: E402
from benchmarks.ray_local import (  # noqa: E402
    Faults,
    LocalRayCluster,
    experiment_toml,
    run_ray_experiment,
)
from engine.grading.judge.runner_proc import process_tree  # noqa: E402
from engine.paired_repeats import arm_at  # noqa: E402
from storage.store import Store  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # its time and memory bounds: alone
MAX_PEAK_MB = 3 * 1024
GRADER_PROCESSES = ("engine.grading.parent.zygote", "orphan_guard", "bwrap", "/mkb-runner/")


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


class Watch:
    """Samples this process tree: peak summed PSS, and every grader process it ever held."""

    def __init__(self) -> None:
        self.peak_kb = 0
        self.base_kb: int | None = None  # this process alone, before the cluster
        self.graders: dict[tuple[int, str], str] = {}  # (pid, start time) -> command line
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for pid in process_tree(os.getpid()):
                try:
                    with open(f"/proc/{pid}/smaps_rollup") as fh:
                        total += sum(int(ln.split()[1]) for ln in fh if ln.startswith("Pss:"))
                    with open(f"/proc/{pid}/cmdline", "rb") as fh:
                        cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                stat = _stat(pid)
                if stat and any(p in cmd for p in GRADER_PROCESSES):
                    self.graders[(pid, stat[1])] = cmd[:120]
            self.peak_kb = max(self.peak_kb, total)
            if self.base_kb is None:
                self.base_kb = total
            self._stop.wait(0.5)

    def alive_graders(self) -> list[str]:
        """Grader processes seen so far that still run (same pid, same start time)."""
        left = []
        for (pid, started), cmd in self.graders.items():
            stat = _stat(pid)
            if stat is not None and stat[1] == started and stat[0] != "Z":
                left.append(f"{pid}: {cmd}")
        return left

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[LocalRayCluster, Watch, float]]:
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    watch = Watch()
    watch.start()
    while watch.base_kb is None:
        time.sleep(0.05)
    started = time.perf_counter()
    local = LocalRayCluster(workers=3)
    local.start()
    try:
        yield local, watch, started
    finally:
        local.shutdown()
        watch.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def results(db: Path) -> list[tuple[Any, ...]]:
    """Per submission: id, state, verdict, done jobs, all jobs."""
    with Store(db) as store:
        return store.read_sync(
            lambda d: d.execute(
                "SELECT s.id, s.state, s.verdict,"
                " (SELECT count(*) FROM grading_jobs g WHERE g.submission_id=s.id AND"
                "  g.state='done'),"
                " (SELECT count(*) FROM grading_jobs g WHERE g.submission_id=s.id)"
                " FROM submissions s"
            ).fetchall()
        )


def duplicate_rows(db: Path) -> list[str]:
    with Store(db) as store:
        rows = store.read_sync(
            lambda d: d.execute(
                "SELECT payload_json FROM events WHERE kind='grading_duplicate'"
            ).fetchall()
        )
    return [r[0] for r in rows]


def test_real_gradings_survive_a_sigkilled_grader(
    cluster: tuple[LocalRayCluster, Watch, float], tmp_path: Path
) -> None:
    import asyncio

    local, watch, _ = cluster
    toml = experiment_toml(
        local.address,
        replicates=1,
        submissions=2,
        sandboxes=4,
        grading_slots=2,
        grader="local",
        extra="graders = 1\nheartbeat_s = 0.5\nlost_after_s = 5.0",
    )
    faults = Faults(kill_at=0.3, remove_at=None)
    run = asyncio.run(
        run_ray_experiment(tmp_path / "real.sqlite", toml, local, faults, ScriptedRunner(2))
    )
    rows = results(tmp_path / "real.sqlite")
    print(
        f"real: {run['wall_s']:.1f} s, {run['status']}, {faults}, peak {watch.peak_kb // 1024} MB"
    )
    assert faults.killed, "the grader actor was never killed"
    assert run["summary"].by_state == {"finished": 4}
    assert len(rows) == run["expected_gradings"] == 12
    for sub_id, state, verdict, done, _ in rows:  # real gradings: jailed, CPU preview
        assert (state, verdict, done) == ("done", "preview", 1), sub_id
    assert run["status"]["restarts"] >= 1 and run["status"]["requeued"] >= 1
    assert len(duplicate_rows(tmp_path / "real.sqlite")) == len(run["duplicates"])
    assert any("zygote" in cmd for cmd in watch.graders.values())
    assert any("bwrap" in cmd or "/mkb-runner/" in cmd for cmd in watch.graders.values())
    deadline = time.monotonic() + 15
    while watch.alive_graders() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert watch.alive_graders() == []


def test_paired_finals_each_on_one_grader(
    cluster: tuple[LocalRayCluster, Watch, float], tmp_path: Path
) -> None:
    import asyncio

    from storage import repeats as repeat_rows

    local, _, _ = cluster
    toml = experiment_toml(
        local.address,
        replicates=2,
        submissions=1,
        sandboxes=4,
        grading_slots=4,
        simulated_s=(0.02, 0.05),
    )
    toml = toml.replace("[grading.ray]", "[grading]\npaired_repeats = 2\n\n[grading.ray]")
    toml = toml.replace("[agent]", "[agent]\nfinal_runtime_ms = 1.0")
    db = tmp_path / "paired.sqlite"
    run = asyncio.run(run_ray_experiment(db, toml))
    assert run["summary"].by_state == {"finished": 8}
    with Store(db) as store:
        jobs = store.read_sync(repeat_rows.paired_rows, "ray")
    assert len(jobs) == 4
    slots = set()
    for rows in jobs.values():
        assert [(r.repeat, r.arm, r.state) for r in rows] == [
            (p, arm_at(p, str(rows[0].pair_key)), "done") for p in range(1, 5)
        ]
        assert len({r.slot for r in rows}) == 1 and ":ray-actor-" in rows[0].slot
        slots.add(rows[0].slot)
    print(f"paired on Ray: {run['wall_s']:.1f} s, jobs on {len(slots)} graders")


def test_faults_at_scale_every_job_stored_once(
    cluster: tuple[LocalRayCluster, Watch, float], tmp_path: Path
) -> None:
    import asyncio

    local, watch, started = cluster
    toml = experiment_toml(
        local.address,
        replicates=10,
        submissions=4,
        sandboxes=12,
        grading_slots=8,
        simulated_s=(0.1, 0.5),
        extra="heartbeat_s = 0.5\nlost_after_s = 3.0",
    )
    calm = asyncio.run(run_ray_experiment(tmp_path / "calm.sqlite", toml))
    faults = Faults(kill_at=0.3, remove_at=0.6)
    hit = asyncio.run(run_ray_experiment(tmp_path / "hit.sqlite", toml, local, faults))
    print(  # figures for docs/scaling.md (pytest -s)
        f"calm {calm['wall_s']:.1f} s, with faults {hit['wall_s']:.1f} s, "
        f"status {hit['status']}, faults {faults}, peak {watch.peak_kb // 1024} MB"
    )
    for run, db in ((calm, tmp_path / "calm.sqlite"), (hit, tmp_path / "hit.sqlite")):
        rows = results(db)
        assert run["summary"].by_state == {"finished": 40}
        assert len(rows) == run["expected_gradings"] == 200
        for sub_id, state, _, done, jobs in rows:  # one job per submission, one result
            assert (state, done, jobs) == ("done", 1, 1), sub_id
        assert len(duplicate_rows(db)) == len(run["duplicates"])  # each one on record
    assert faults.killed and faults.removed, faults
    assert hit["status"]["restarts"] >= 1 and hit["status"]["requeued"] >= 1
    graded = {str(d.key) for d in hit["duplicates"]}
    assert all(key.isdigit() for key in graded)  # keyed by the store's grading job ids
    assert hit["wall_s"] < 1.5 * calm["wall_s"], (hit["wall_s"], calm["wall_s"])
    assert watch.alive_graders() == []
    # what the cluster and the graders add (in a full run this process holds other tests' data)
    assert watch.peak_kb - (watch.base_kb or 0) < MAX_PEAK_MB * 1024, watch.peak_kb // 1024
    assert time.perf_counter() - started < 180, "the module took over 3 minutes"
