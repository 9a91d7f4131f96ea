"""``mkb regrade``: every implementation of a bundle graded again by this host's grader.

The re-grade is an experiment of its own in the store (``<id>-regrade-<sha8>``, origin
``regrade:<bundle sha256>``), beside the bundle's experiment as it was graded (restored as
``<id>`` when the store does not hold it). Each implementation is one submission row there;
a grading is one ``grading_jobs`` row and a submission is graded until one grading finishes
(``state = done``), so a re-grade stopped at any point (``kill -9`` included) and run again
grades only what had not finished: nothing twice. A problem whose source in this catalog
differs from the bundle's is not graded (``--allow-changed`` grades it anyway) and is named
in the report. One process re-grades an experiment at a time (the run lock).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.attempt_records import outcome_of
from engine.bundle.content import Bundle
from engine.bundle.restore import latest_finals, restore
from engine.grading.admission import admit, retryable
from engine.grading.api import Feedback, GradeRequest, GradingBackend
from storage import queries, run_locks, writes
from storage.db import now
from storage.store import Store

INTERRUPTED = "interrupted: the re-grade stopped before this grading finished"


@dataclass(frozen=True)
class RegradeOptions:
    device: str = "auto"  # the GradeRequest device: auto, cpu or cuda
    jobs: int = 1  # gradings at once
    allow_changed: bool = False  # grade problems whose source differs from the bundle's
    max_tries: int = 3  # gradings per implementation that end in an infrastructure error


@dataclass
class RegradeSetup:
    original_id: str
    regrade_id: str
    restore_original: bool
    changed_problems: list[dict[str, Any]] = field(default_factory=list)
    gpu: str | None = None  # this host's grading target (None: no GPU, the default)

    @property
    def skip_problems(self) -> set[str]:
        return {c["problem"] for c in self.changed_problems if not c.get("graded_anyway")}


@dataclass(frozen=True)
class Job:
    submission_id: int
    attempt_id: int
    purpose: str
    try_number: int
    n: int
    problem_id: str
    dsl: str
    source: str


def changed_problems(bundle: Bundle, allow_changed: bool) -> list[dict[str, Any]]:
    """Problems whose source in this catalog differs from the bundle's (or is missing)."""
    from engine.bundle.archive import sha256
    from problems.registry import problem_files

    local = {p.stem.split("_", 1)[0]: p for p in problem_files()}
    out = []
    for pid, row in sorted(bundle.problems.items()):
        path = local.get(pid)
        here = sha256(path.read_bytes()) if path else None
        if here != row.get("sha256"):
            out.append(
                {
                    "problem": pid,
                    "bundle_sha256": row.get("sha256"),
                    "local_sha256": here,
                    "graded_anyway": allow_changed and here is not None,
                }
            )
    return out


def plan_setup(db: Any, bundle: Bundle, allow_changed: bool) -> RegradeSetup:
    """Which experiments the re-grade writes: the original (restored unless the store holds
    it) and the re-grade, both named from the bundle's experiment id and digest."""
    orig, short = bundle.experiment_id, bundle.sha256[:8]
    held = queries.experiment(db, orig)
    same = held is not None and (
        held.origin == f"bundle:{bundle.sha256}"
        or (held.origin == "" and held.config_hash == bundle.experiment.get("config_hash"))
    )
    original_id = orig if held is None or same else f"{orig}-bundle-{short}"
    restore_original = queries.experiment(db, original_id) is None
    return RegradeSetup(
        original_id,
        f"{orig}-regrade-{short}",
        restore_original,
        changed_problems(bundle, allow_changed),
        _host_gpu(),
    )


def _host_gpu() -> str | None:
    from engine.bundle.hosts import describe_this_host
    from problems.targets import target_for_device

    gpus = describe_this_host()["gpus"]
    found = target_for_device(gpus[0]) if gpus else None
    return found.key if found else None


def prepare(db: Any, bundle: Bundle, setup: RegradeSetup, owner: str, command: str) -> None:
    """One write: the run lock, the experiments (first run), and after a stop, gradings left
    running by the stopped process closed as interrupted (their submissions queued again)."""
    run_locks.acquire(db, setup.regrade_id, owner, command=command)
    name = str(bundle.experiment.get("name") or bundle.experiment_id)
    if setup.restore_original:
        restore(
            db,
            bundle,
            setup.original_id,
            origin=f"bundle:{bundle.sha256}",
            name=f"{name} (from bundle)",
            regrade=False,
        )
    if queries.experiment(db, setup.regrade_id) is None:
        restore(
            db,
            bundle,
            setup.regrade_id,
            origin=f"regrade:{bundle.sha256}",
            name=f"{name} (re-graded here)",
            regrade=True,
            skip_problems=setup.skip_problems,
            gpu=setup.gpu,
        )
        return
    writes.interrupt_running_gradings(db, setup.regrade_id, INTERRUPTED)


def pending_jobs(db: Any, regrade_id: str) -> list[Job]:
    """The implementations whose grading has not finished, in submission order."""
    rows = db.execute(
        "SELECT s.id, s.attempt_id, s.purpose, s.try, s.n, a.problem_id, a.dsl, s.source "
        "FROM submissions s JOIN attempts a ON a.id = s.attempt_id "
        "WHERE a.experiment_id = ? AND s.state != 'done' ORDER BY s.id",
        [regrade_id],
    ).fetchall()
    return [Job(*row) for row in rows]


def _latest_final_ids(db: Any, regrade_id: str) -> set[int]:
    """Submission ids of each attempt's last final (it decides the attempt's outcome)."""
    rows = db.execute(
        "SELECT s.id, s.attempt_id, s.try, s.n FROM submissions s JOIN attempts a "
        "ON a.id = s.attempt_id WHERE a.experiment_id = ? AND s.purpose = 'final'",
        [regrade_id],
    ).fetchall()
    best: dict[int, tuple[int, int, int]] = {}
    for sid, aid, try_number, n in rows:
        if aid not in best or (try_number, n) >= best[aid][1:]:
            best[aid] = (sid, try_number, n)
    return {v[0] for v in best.values()}


def record_grading(
    db: Any, job: Job, job_id: int, feedback: dict[str, Any], decides: bool, lock: tuple[str, str]
) -> None:
    """The grading's feedback; for an attempt's last final, the attempt's outcome."""
    writes.finish_grading_job(db, job_id, feedback)
    run_locks.heartbeat(db, *lock)
    if not decides or feedback.get("verdict") == "error":
        return
    outcome, reason = outcome_of(Feedback.from_dict(feedback))
    writes.update_attempt(
        db,
        job.attempt_id,
        "attempt_finished",
        state="finished",
        outcome=outcome,
        reason=reason,
        speedup=feedback.get("speedup"),
        impl_median_ms=feedback.get("impl_median_ms"),
        eager_median_ms=feedback.get("eager_median_ms"),
        ended_at=now(),
    )


def finish(db: Any, bundle: Bundle, setup: RegradeSetup, owner: str) -> None:
    """Comparisons from the re-graded outcomes; the experiment finished; the lock released."""
    from engine.bundle.restore import comparison_specs
    from engine.imports.records import write_comparisons

    left = db.execute(
        "SELECT count(*) FROM submissions s JOIN attempts a ON a.id = s.attempt_id "
        "WHERE a.experiment_id = ? AND s.state != 'done'",
        [setup.regrade_id],
    ).fetchone()[0]
    previews = db.execute(
        "SELECT count(*) FROM submissions s JOIN attempts a ON a.id = s.attempt_id "
        "WHERE a.experiment_id = ? AND s.verdict = 'preview'",
        [setup.regrade_id],
    ).fetchone()[0]
    if previews:
        writes.mark_experiment_preview(db, setup.regrade_id)
    write_comparisons(db, setup.regrade_id, comparison_specs(bundle))
    writes.set_experiment_state(db, setup.regrade_id, "stopped" if left else "finished")
    run_locks.release(db, setup.regrade_id, owner)


async def _grade(
    store: Store,
    backend: GradingBackend,
    job: Job,
    opts: RegradeOptions,
    decides: bool,
    lock: tuple[str, str],
) -> Feedback:
    feedback = Feedback("error", "crash", "not graded")
    for _ in range(opts.max_tries):
        job_id = await store.write(writes.start_grading_job, job.submission_id, backend.name)
        request = GradeRequest(
            job.problem_id,
            job.dsl,
            job.source,
            device=opts.device,
            request_id=f"regrade-{job.submission_id}",
            purpose=job.purpose,
        )
        try:
            feedback = await backend.grade(request)
        except Exception as exc:  # noqa: BLE001 - a broken backend is an infrastructure error
            feedback = Feedback("error", "crash", f"{type(exc).__name__}: {exc}")
        feedback = admit(feedback)  # engine/grading/admission.py: timings and infra reasons
        await store.write(record_grading, job, job_id, feedback.to_dict(), decides, lock)
        if not retryable(feedback):
            break
    return feedback


async def run_regrade(
    store: Store,
    bundle: Bundle,
    backend: GradingBackend,
    opts: RegradeOptions,
    *,
    command: str = "mkb regrade",
    on_graded: Callable[[Job, Feedback], None] | None = None,
) -> RegradeSetup:
    """Grade every implementation not graded yet; returns which experiments were written."""
    setup = await store.read(plan_setup, bundle, opts.allow_changed)
    owner = f"regrade-{uuid.uuid4().hex[:12]}"
    run_locks.register_owner(owner)
    try:
        await store.write(prepare, bundle, setup, owner, command)
        jobs = await store.read(pending_jobs, setup.regrade_id)
        deciding = await store.read(_latest_final_ids, setup.regrade_id)
        gate = asyncio.Semaphore(max(1, opts.jobs))

        async def one(job: Job) -> None:
            async with gate:
                fb = await _grade(
                    store,
                    backend,
                    job,
                    opts,
                    job.submission_id in deciding,
                    (setup.regrade_id, owner),
                )
            if on_graded is not None:
                on_graded(job, fb)

        await asyncio.gather(*(one(job) for job in jobs))
        await store.write(finish, bundle, setup, owner)
    finally:
        run_locks.unregister_owner(owner)
    return setup


def latest_final_map(bundle: Bundle) -> dict[int, int]:
    """Bundle attempt id → submission id of its last final (for reports)."""
    return {aid: impl.submission_id for aid, impl in latest_finals(bundle).items()}
