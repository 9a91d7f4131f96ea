"""Schema migrations (``sqlite_utils.Migrations``), one function per step, ``m00N_<verb>_<noun>``.

Enums are CHECK-constrained, timestamps are UTC ISO-8601 ``*_at`` text, foreign keys are
``<table>_id``. Append new migrations at the end; never edit an applied one.
"""

from __future__ import annotations

from sqlite_utils import Database, Migrations

MIGRATION_SET = "metakernelbench"
migrations = Migrations(MIGRATION_SET)

ARMS = ("solo_cute", "solo_tirx", "cute2tirx_skill", "tirx2cute_skill")
ATTEMPT_STATES = (
    "planned",
    "queued",
    "running",
    "final_eval",
    "finished",
    "failed",
    "skipped",
    "interrupted",
)
OUTCOMES = ("pass", "fail", "preview", "skipped")
VERDICTS = ("pass", "fail", "preview", "error")
JOB_STATES = ("queued", "running", "done", "error")
EXPERIMENT_STATES = ("planned", "running", "paused", "stopped", "finished")


def _enum(column: str, values: tuple[str, ...], nullable: bool = False) -> str:
    options = ", ".join(f"'{v}'" for v in values)
    check = f"{column} IN ({options})"
    return f"CHECK ({column} IS NULL OR {check})" if nullable else f"CHECK ({check})"


@migrations()
def m001_create_core(db: Database) -> None:
    """The whole domain: experiments to events."""
    db.executescript(
        f"""
        CREATE TABLE experiments (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            config_toml TEXT NOT NULL DEFAULT '',
            config_hash TEXT NOT NULL DEFAULT '',
            state TEXT NOT NULL DEFAULT 'planned' {_enum("state", EXPERIMENT_STATES)},
            preview INTEGER NOT NULL DEFAULT 0 CHECK (preview IN (0, 1)),
            grading_backend TEXT NOT NULL DEFAULT 'local',
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );

        CREATE TABLE skills (
            id INTEGER PRIMARY KEY,
            attempt_id INTEGER REFERENCES attempts(id) ON DELETE SET NULL,
            kind TEXT NOT NULL {_enum("kind", ("collected", "edited"))},
            text TEXT NOT NULL,
            text_hash TEXT NOT NULL,
            author TEXT NOT NULL DEFAULT '',
            parent_skill_id INTEGER REFERENCES skills(id),
            created_at TEXT NOT NULL
        );
        CREATE INDEX skills_attempt ON skills(attempt_id);

        CREATE TABLE attempts (
            id INTEGER PRIMARY KEY,
            experiment_id TEXT NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
            plan_key TEXT NOT NULL,
            model TEXT NOT NULL,
            problem_id TEXT NOT NULL,
            family TEXT NOT NULL DEFAULT '',
            dsl TEXT NOT NULL {_enum("dsl", ("cute", "tirx"))},
            arm TEXT NOT NULL {_enum("arm", ARMS)},
            replicate INTEGER NOT NULL DEFAULT 1 CHECK (replicate >= 1),
            round INTEGER NOT NULL DEFAULT 0 CHECK (round >= 0),
            variant TEXT NOT NULL DEFAULT '',
            source_attempt_id INTEGER REFERENCES attempts(id),
            attached_skill_id INTEGER REFERENCES skills(id),
            state TEXT NOT NULL DEFAULT 'planned' {_enum("state", ATTEMPT_STATES)},
            outcome TEXT {_enum("outcome", OUTCOMES, nullable=True)},
            reason TEXT,
            speedup REAL,
            impl_median_ms REAL,
            eager_median_ms REAL,
            best_speedup REAL,
            submissions_used INTEGER NOT NULL DEFAULT 0,
            tries INTEGER NOT NULL DEFAULT 0,
            budget_s REAL NOT NULL DEFAULT 2400,
            task_hash TEXT NOT NULL DEFAULT '',
            skill_hash TEXT NOT NULL DEFAULT '',
            final_source TEXT,
            tokens_in INTEGER NOT NULL DEFAULT 0,
            tokens_out INTEGER NOT NULL DEFAULT 0,
            cost_usd REAL NOT NULL DEFAULT 0,
            agent_seconds REAL NOT NULL DEFAULT 0,
            error TEXT,
            started_at TEXT,
            ended_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            UNIQUE (experiment_id, plan_key)
        );
        CREATE INDEX attempts_state ON attempts(experiment_id, state);
        CREATE INDEX attempts_lookup ON attempts(model, problem_id, arm, replicate);

        CREATE TABLE trajectory_steps (
            id INTEGER PRIMARY KEY,
            attempt_id INTEGER NOT NULL REFERENCES attempts(id) ON DELETE CASCADE,
            try INTEGER NOT NULL DEFAULT 1,
            step_index INTEGER NOT NULL,
            source TEXT NOT NULL DEFAULT 'agent',
            analysis TEXT NOT NULL DEFAULT '',
            plan TEXT NOT NULL DEFAULT '',
            keystrokes TEXT NOT NULL DEFAULT '',
            terminal_output TEXT NOT NULL DEFAULT '',
            message TEXT NOT NULL DEFAULT '',
            tokens_in INTEGER NOT NULL DEFAULT 0,
            tokens_out INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            UNIQUE (attempt_id, try, step_index)
        );

        CREATE TABLE submissions (
            id INTEGER PRIMARY KEY,
            attempt_id INTEGER NOT NULL REFERENCES attempts(id) ON DELETE CASCADE,
            try INTEGER NOT NULL DEFAULT 1,
            purpose TEXT NOT NULL DEFAULT 'submission' {_enum("purpose", ("submission", "final"))},
            n INTEGER NOT NULL CHECK (n >= 0),
            source TEXT NOT NULL,
            source_hash TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'queued' {_enum("state", JOB_STATES)},
            verdict TEXT {_enum("verdict", VERDICTS, nullable=True)},
            reason TEXT,
            speedup REAL,
            impl_median_ms REAL,
            eager_median_ms REAL,
            feedback_json TEXT,
            submitted_at TEXT NOT NULL,
            graded_at TEXT,
            UNIQUE (attempt_id, try, purpose, n)
        );

        CREATE TABLE grading_jobs (
            id INTEGER PRIMARY KEY,
            submission_id INTEGER NOT NULL REFERENCES submissions(id) ON DELETE CASCADE,
            backend TEXT NOT NULL,
            worker TEXT NOT NULL DEFAULT '',
            state TEXT NOT NULL DEFAULT 'queued' {_enum("state", JOB_STATES)},
            try INTEGER NOT NULL DEFAULT 1,
            error TEXT,
            queued_at TEXT NOT NULL,
            started_at TEXT,
            finished_at TEXT
        );
        CREATE INDEX grading_jobs_state ON grading_jobs(state);

        CREATE TABLE comparisons (
            id INTEGER PRIMARY KEY,
            experiment_id TEXT NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
            model TEXT NOT NULL,
            problem_id TEXT NOT NULL,
            family TEXT NOT NULL DEFAULT '',
            direction TEXT NOT NULL {_enum("direction", ("cute->tirx", "tirx->cute"))},
            replicate INTEGER NOT NULL DEFAULT 1,
            round INTEGER NOT NULL DEFAULT 0,
            variant TEXT NOT NULL DEFAULT '',
            source_attempt_id INTEGER REFERENCES attempts(id),
            baseline_attempt_id INTEGER REFERENCES attempts(id),
            treatment_attempt_id INTEGER REFERENCES attempts(id),
            resolved INTEGER NOT NULL DEFAULT 0 CHECK (resolved IN (0, 1)),
            skipped INTEGER NOT NULL DEFAULT 0 CHECK (skipped IN (0, 1)),
            rho REAL,
            verdict TEXT {_enum("verdict", ("help", "harm", "neutral"), nullable=True)},
            updated_at TEXT NOT NULL,
            UNIQUE (experiment_id, model, problem_id, direction, replicate, round, variant)
        );

        CREATE TABLE labels (
            id INTEGER PRIMARY KEY,
            task TEXT NOT NULL {_enum("task", ("skill", "uptake", "cause"))},
            subject_type TEXT NOT NULL {_enum("subject_type", ("skill", "attempt", "comparison"))},
            subject_id INTEGER NOT NULL,
            category TEXT NOT NULL,
            value TEXT NOT NULL,
            evidence TEXT NOT NULL DEFAULT '',
            annotator TEXT NOT NULL,
            annotator_kind TEXT NOT NULL {_enum("annotator_kind", ("llm", "human"))},
            rubric_hash TEXT NOT NULL DEFAULT '',
            raw_reply TEXT,
            tokens_in INTEGER NOT NULL DEFAULT 0,
            tokens_out INTEGER NOT NULL DEFAULT 0,
            cost_usd REAL NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            UNIQUE (task, subject_type, subject_id, category, annotator)
        );

        CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            experiment_id TEXT,
            attempt_id INTEGER,
            kind TEXT NOT NULL,
            payload_json TEXT NOT NULL DEFAULT '{{}}',
            created_at TEXT NOT NULL
        );
        CREATE INDEX events_experiment ON events(experiment_id, id);
        """
    )


@migrations()
def m002_add_attempt_unsafe_no_jail(db: Database) -> None:
    """Whether an attempt's sandbox ran without the agent jail (``--unsafe-no-jail``)."""
    db.execute(
        "ALTER TABLE attempts ADD COLUMN unsafe_no_jail INTEGER NOT NULL DEFAULT 0 "
        "CHECK (unsafe_no_jail IN (0, 1))"
    )


@migrations()
def m003_create_run_locks(db: Database) -> None:
    """Which engine runs an experiment: one row per running experiment (``storage/run_locks``).

    ``pid``, ``host`` and ``proc_start`` (boot id and start time of the process, where the
    host has ``/proc``) identify the engine's process so a lock left by a killed one is seen
    dead at once on the same host; ``heartbeat_at`` ages it out from other hosts.
    """
    db.execute(
        """
        CREATE TABLE run_locks (
            experiment_id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            pid INTEGER NOT NULL,
            host TEXT NOT NULL,
            proc_start TEXT NOT NULL DEFAULT '',
            command TEXT NOT NULL DEFAULT '',
            started_at TEXT NOT NULL,
            heartbeat_at TEXT NOT NULL
        )
        """
    )


@migrations()
def m004_index_attempts_by_experiment(db: Database) -> None:
    """Attempts by experiment in id order: the Attempts screen's page (``ORDER BY id LIMIT
    100 OFFSET n`` within an experiment) walks this index instead of sorting every attempt
    of the experiment (a filtered page read 8 → 4 ms, a deep page 15 → 3 ms at 10,000)."""
    db.execute("CREATE INDEX attempts_experiment ON attempts(experiment_id)")


@migrations()
def m005_add_experiment_origin(db: Database) -> None:
    """Where an experiment came from (``origin``: empty for a run of this store, else
    ``bundle:<sha256>``, ``regrade:<sha256>``, ``mkb-run:<dir>`` or ``harbor-job:<dir>``) and
    the reports written about it (``experiment_reports``: an import's unknown records, a
    re-grade's agreement report), one JSON document per row (``storage/provenance.py``)."""
    db.execute("ALTER TABLE experiments ADD COLUMN origin TEXT NOT NULL DEFAULT ''")
    db.execute(
        """
        CREATE TABLE experiment_reports (
            id INTEGER PRIMARY KEY,
            experiment_id TEXT NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
            kind TEXT NOT NULL CHECK (kind IN ('import', 'regrade', 'bundle')),
            payload_json TEXT NOT NULL,
            created_at TEXT NOT NULL
        )
        """
    )
    db.execute(
        "CREATE INDEX experiment_reports_experiment ON experiment_reports(experiment_id, id)"
    )


@migrations()
def m006_add_experiment_gpu(db: Database) -> None:
    """The GPU an experiment is graded on (``[grading] gpu`` made concrete: ``b200``, ``h200``
    or ``h100``; ``problems/targets.py``); rows from before it say ``h200``, the only GPU
    graded on until then."""
    db.execute("ALTER TABLE experiments ADD COLUMN gpu TEXT NOT NULL DEFAULT 'h200'")


@migrations()
def m007_create_timing_repeats(db: Database) -> None:
    """Repeated gradings of one unchanged file (``storage/repeats.py``): an attempt's repeated
    finals (``series`` = ``final:<attempt id>:<try>``, repeat 1 being its final evaluation) and
    ``mkb noise`` runs (``noise:<id>``), one row per grading, unique per series and repeat so a
    resumed run never grades a stored repeat again. The A/A bands per problem and grading host
    (``host``: the grading machine and its device) are pooled from them
    (``engine/analysis/noise.py``)."""
    db.executescript(
        f"""
        CREATE TABLE timing_repeats (
            id INTEGER PRIMARY KEY,
            series TEXT NOT NULL,
            repeat INTEGER NOT NULL CHECK (repeat >= 1),
            kind TEXT NOT NULL {_enum("kind", ("final", "noise"))},
            experiment_id TEXT REFERENCES experiments(id) ON DELETE CASCADE,
            attempt_id INTEGER REFERENCES attempts(id) ON DELETE CASCADE,
            problem_id TEXT NOT NULL,
            dsl TEXT NOT NULL,
            source_hash TEXT NOT NULL,
            host TEXT NOT NULL DEFAULT '',
            state TEXT NOT NULL DEFAULT 'running' {_enum("state", ("running", "done", "error"))},
            verdict TEXT {_enum("verdict", VERDICTS, nullable=True)},
            reason TEXT,
            impl_median_ms REAL,
            eager_median_ms REAL,
            speedup REAL,
            feedback_json TEXT,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            UNIQUE (series, repeat)
        );
        CREATE INDEX timing_repeats_problem ON timing_repeats(problem_id, host);
        CREATE INDEX timing_repeats_attempt ON timing_repeats(attempt_id);
        """
    )


@migrations()
def m008_add_repeat_pairing(db: Database) -> None:
    """Paired finals (``engine/paired_repeats.py``): a comparison's two final files graded
    interleaved (A B B A A B …) on one grading slot. ``pair_key`` (``pair:<experiment id>:
    <comparison id>``, NULL for unpaired rows) is shared by both arms' rows of one paired job,
    ``arm`` says which (``baseline`` or ``treatment``), ``repeat`` is the row's 1-based position
    in the job's order, so the i-th baseline and i-th treatment rows form pair i. Every row
    records the ``slot`` that graded it (``Feedback.host``, e.g. ``hostname:gpu0``; ``host``
    stays machine · device) and the submission's GPU span per call (``span_ms``, NULL when
    absent). Unpaired rows keep NULL ``pair_key`` and ``arm``; existing rows get their slot
    and span from their stored feedback."""
    db.executescript(
        """
        ALTER TABLE timing_repeats ADD COLUMN pair_key TEXT;
        ALTER TABLE timing_repeats ADD COLUMN arm TEXT
            CHECK (arm IS NULL OR arm IN ('baseline', 'treatment'));
        ALTER TABLE timing_repeats ADD COLUMN slot TEXT NOT NULL DEFAULT '';
        ALTER TABLE timing_repeats ADD COLUMN span_ms REAL;
        CREATE INDEX timing_repeats_pair ON timing_repeats(pair_key);
        UPDATE timing_repeats SET
            slot = coalesce(CASE WHEN json_valid(feedback_json)
                THEN json_extract(feedback_json, '$.host') END, ''),
            span_ms = CASE WHEN json_valid(feedback_json) AND json_type(feedback_json,
                '$.clock.breakdown.submission.span_ms') IN ('integer', 'real')
                AND json_extract(feedback_json, '$.clock.breakdown.submission.span_ms') > 0
                THEN json_extract(feedback_json, '$.clock.breakdown.submission.span_ms') END
        WHERE feedback_json IS NOT NULL;
        """
    )


UNGRADED_OUTCOMES = (*OUTCOMES, "ungraded")
_LEGACY_INFRA_FINALS = """
    SELECT a.id, (
        SELECT g.error FROM grading_jobs g WHERE g.submission_id = s.id ORDER BY g.id DESC LIMIT 1
    )
    FROM attempts a JOIN submissions s ON s.id = (
        SELECT id FROM submissions WHERE attempt_id = a.id AND purpose = 'final'
        ORDER BY try DESC, n DESC LIMIT 1
    )
    WHERE a.outcome = 'fail' AND a.state = 'finished'
      AND NOT EXISTS (SELECT 1 FROM grading_jobs g WHERE g.submission_id = s.id
                      AND g.state = 'done')
      AND EXISTS (SELECT 1 FROM grading_jobs g WHERE g.submission_id = s.id
                  AND g.state = 'error')
"""


def _legacy_infra_reason(error: str | None) -> str:
    """The ``infra.*`` reason of a stored grading error (as of this migration; the engine
    names new ones in ``engine/grading/admission.py``)."""
    text = (error or "").lower()
    if "outofmemoryerror" in text or "out of memory" in text or "memoryerror" in text:
        return "infra.oom"
    if "gpu is lost" in text or "no cuda-capable device" in text:
        return "infra.device_lost"
    if "connection" in text or "worker died" in text or "actor died" in text:
        return "infra.host_lost"
    return "infra.judge_crash"


@migrations()
def m009_add_ungraded_outcome(db: Database) -> None:
    """An attempt whose final grading failed for the grader's own reasons (out of memory in
    the judge, a judge crash, a lost device or host: ``infra.*``) is ``ungraded``, never
    ``fail``: the outcome CHECK admits ``ungraded``, and attempts stored ``fail`` whose last
    final evaluation never got a verdict (every grading job of it ended in an error) become
    ``ungraded`` with the error's ``infra.*`` reason, their comparisons unresolved.

    The CHECK is widened by SQLite's documented in-place schema edit for CHECK constraints
    (``PRAGMA writable_schema``, ``schema_version`` bumped; sqlite.org/lang_altertable.html,
    "Making Other Kinds Of Table Schema Changes") rather than a table rebuild: a rebuild needs
    foreign keys off, which cannot be switched inside the migration's transaction, and would
    cascade-delete every row that references an attempt. Widening an ``IN`` list leaves
    every stored row valid and the file's format unchanged."""
    sql = db.execute(
        "SELECT sql FROM sqlite_master WHERE type='table' AND name='attempts'"
    ).fetchone()[0]
    old = _enum("outcome", OUTCOMES, nullable=True)
    if old not in sql:
        raise RuntimeError("m009: the attempts table's outcome CHECK is not the expected one")
    version = db.execute("PRAGMA schema_version").fetchone()[0]
    db.execute("PRAGMA writable_schema=ON")
    try:
        db.execute(
            "UPDATE sqlite_master SET sql=? WHERE type='table' AND name='attempts'",
            [sql.replace(old, _enum("outcome", UNGRADED_OUTCOMES, nullable=True))],
        )
        db.execute(f"PRAGMA schema_version={int(version) + 1}")
    finally:
        db.execute("PRAGMA writable_schema=OFF")
    for attempt_id, error in db.execute(_LEGACY_INFRA_FINALS).fetchall():
        db.execute(
            "UPDATE attempts SET outcome='ungraded', reason=?, speedup=NULL WHERE id=?",
            [_legacy_infra_reason(error), attempt_id],
        )
        db.execute(
            "UPDATE comparisons SET resolved=0, rho=NULL, verdict=NULL "
            "WHERE ? IN (baseline_attempt_id, treatment_attempt_id)",
            [attempt_id],
        )


CONTROL_ACTIONS = (
    "stop",
    "retry",
    "extend",
    "note",
    "exclude",
    "include",
    "pause",
    "resume",
    "stop_run",
)
CONTROL_STATES = ("pending", "applying", "applied", "refused", "failed")


@migrations()
def m010_create_control_commands(db: Database) -> None:
    """Supervision through the store (``storage/controls.py``): one row per operator action
    on an attempt or an experiment, written by whoever acts (``mkb attempt``, a TUI, the
    browser view) and applied by the engine holding the run lock. ``state`` moves
    ``pending`` → ``applying`` (claimed by ``claimed_by``, an engine's run-lock token) →
    ``applied`` | ``refused`` | ``failed``; an applied row is the intervention's record (who,
    when, what, why, outcome). An operator's stop is ``attempts.stop_reason`` beside the
    state (the state column's CHECK stays as it is: no table rebuild)."""
    db.executescript(
        f"""
        CREATE TABLE control_commands (
            id INTEGER PRIMARY KEY,
            experiment_id TEXT NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
            attempt_id INTEGER REFERENCES attempts(id) ON DELETE CASCADE,
            action TEXT NOT NULL {_enum("action", CONTROL_ACTIONS)},
            args_json TEXT NOT NULL DEFAULT '{{}}',
            reason TEXT NOT NULL DEFAULT '',
            actor TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending' {_enum("state", CONTROL_STATES)},
            claimed_by TEXT,
            outcome TEXT NOT NULL DEFAULT '',
            created_at TEXT NOT NULL,
            applied_at TEXT
        );
        CREATE INDEX control_commands_state ON control_commands(experiment_id, state);
        CREATE INDEX control_commands_attempt ON control_commands(attempt_id, id);
        ALTER TABLE attempts ADD COLUMN stop_reason TEXT;
        """
    )


# the reasons ``engine/attempt_records.failed_outcome`` gives, by the runner's error prefix
_FAILED_REASONS = "CASE WHEN error LIKE 'task build:%' THEN 'infra.task_build' " \
    "WHEN error LIKE 'scenario:%' THEN 'infra.model_endpoint' ELSE 'infra.sandbox' END"


@migrations()
def m011_ungraded_infrastructure_failures(db: Database) -> None:
    """An attempt that ended ``failed`` for our infrastructure (its sandbox, task build or
    the model endpoint failed after its tries) is no result: ``ungraded`` with an ``infra.*``
    reason, its comparisons unresolved. Stores written before held it as ``fail`` with
    reason ``infrastructure``, counted as the agent's failure."""
    rows = db.execute(
        f"SELECT id, {_FAILED_REASONS} FROM attempts "
        "WHERE state='failed' AND outcome='fail' AND reason='infrastructure'"
    ).fetchall()
    for attempt_id, reason in rows:
        db.execute(
            "UPDATE attempts SET outcome='ungraded', reason=?, speedup=NULL WHERE id=?",
            [reason, attempt_id],
        )
        db.execute(
            "UPDATE comparisons SET resolved=0, rho=NULL, verdict=NULL "
            "WHERE ? IN (baseline_attempt_id, treatment_attempt_id)",
            [attempt_id],
        )
