"""Supervision through the store: operator commands and their record (``control_commands``,
migration m010).

Whoever acts (``mkb attempt``, a TUI attached to a run, the browser view started with
``--control``) writes a row with :func:`submit`; the engine holding the experiment's run lock
(``storage/run_locks.py``) polls :func:`pending`, claims each row with :func:`claim` and ends
it with :func:`mark`. A row's ``state``:

* ``pending``: written, not yet taken by an engine;
* ``applying``: claimed by the engine whose run-lock token is ``claimed_by``. A row left
  ``applying`` by an engine that died (``kill -9``) is taken again by the next engine on the
  experiment: every action's durable effect is written in the same transaction as its
  ``applied`` mark, so re-applying it after a crash neither repeats nor loses it;
* ``applied`` (the intervention's record), ``refused`` (said why in ``outcome``), ``failed``.

``note``, ``exclude`` and ``include`` only change data: they are applied at once, in the
submitting transaction, with or without an engine. The other actions need the engine that
holds the run; without one the row is written ``refused`` with :data:`NO_ENGINE` at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

from storage import run_locks
from storage.db import now
from storage.event_rows import append_event
from storage.migrations import CONTROL_ACTIONS

NO_ENGINE = "no engine holds this run"
# a retry with no engine holding the run waits for the experiment's next run, which applies
# it before it decides what to run (a re-grade of an ungraded final, or a new try)
NEXT_RUN = "no engine holds this run: queued for its next run (mkb run)"
DATA_ACTIONS = ("note", "exclude", "include")  # applied at once, engine or not
ATTEMPT_ACTIONS = ("stop", "retry", "extend", "note", "exclude", "include")
RUN_ACTIONS = ("pause", "resume", "stop_run")
INTERVENED = ("stop", "retry", "extend")  # what flags a comparison as intervened
EVENT_KIND = "attempt.control"  # the TUI's tail re-reads attempts on it
_COLUMNS = (
    "id, experiment_id, attempt_id, action, args_json, reason, actor, state, claimed_by, "
    "outcome, created_at, applied_at"
)


class ControlError(ValueError):
    """A command that cannot be written (unknown attempt, missing reason, …)."""


@dataclass(frozen=True)
class Command:
    id: int
    experiment_id: str
    attempt_id: int | None
    action: str
    args_json: str
    reason: str
    actor: str
    state: str
    claimed_by: str | None
    outcome: str
    created_at: str
    applied_at: str | None

    @property
    def args(self) -> dict[str, Any]:
        try:
            value = json.loads(self.args_json or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def describe(self) -> str:
        """One line: ``#3 stop attempt 17 by alice: applied (the attempt was stopped)``."""
        what = f"attempt {self.attempt_id}" if self.attempt_id else self.experiment_id
        why = f" ({self.reason})" if self.reason else ""
        out = f": {self.outcome}" if self.outcome else ""
        return f"#{self.id} {self.action} {what}{why} by {self.actor}: {self.state}{out}"


def _row(db: Database, command_id: int) -> Command:
    row = db.execute(
        f"SELECT {_COLUMNS} FROM control_commands WHERE id = ?", [command_id]
    ).fetchone()
    if row is None:
        raise ControlError(f"no control command {command_id}")
    return Command(*row)


def engine_alive(db: Database, experiment_id: str) -> bool:
    """Whether a live engine holds the experiment's run lock (as ``mkb run`` judges it)."""
    lock = run_locks.current(db, experiment_id)
    return lock is not None and run_locks.is_alive(lock)


def _check(db: Database, experiment_id: str, action: str, attempt_id: int | None,
           reason: str, args: dict[str, Any]) -> None:
    if action not in CONTROL_ACTIONS:
        raise ControlError(f"unknown action {action!r}: one of {', '.join(CONTROL_ACTIONS)}")
    if db.execute("SELECT 1 FROM experiments WHERE id = ?", [experiment_id]).fetchone() is None:
        raise ControlError(f"no experiment {experiment_id!r}")
    if action in ATTEMPT_ACTIONS:
        if attempt_id is None:
            raise ControlError(f"{action} needs an attempt")
        row = db.execute("SELECT experiment_id FROM attempts WHERE id = ?", [attempt_id])
        found = row.fetchone()
        if found is None or found[0] != experiment_id:
            raise ControlError(f"no attempt {attempt_id} in experiment {experiment_id!r}")
    if action in ("exclude", "include") and not reason.strip():
        raise ControlError(f"{action} needs a reason (--reason TEXT)")
    if action == "note" and not str(args.get("text", "")).strip():
        raise ControlError("a note needs text")


def submit(
    db: Database,
    experiment_id: str,
    action: str,
    *,
    actor: str,
    attempt_id: int | None = None,
    reason: str = "",
    args: dict[str, Any] | None = None,
    refuse: str = "",
) -> Command:
    """Write one command (run it in a write transaction); returns its row.

    Raises :class:`ControlError` for a command that cannot be written. A data action is
    applied here; an engine action without a live engine is written ``refused`` (a retry
    stays ``pending``, for the experiment's next run: ``NEXT_RUN``); with
    ``refuse`` (why this actor may not act) it is written ``refused`` so, the refusal logged.
    """
    args = dict(args or {})
    _check(db, experiment_id, action, attempt_id, reason, args)
    state, outcome, applied = "pending", "", None
    if refuse:
        state, outcome, applied = "refused", refuse, now()
    elif action in DATA_ACTIONS:
        state, outcome, applied = "applied", _data_outcome(db, action, attempt_id), now()
    elif not engine_alive(db, experiment_id):
        if action == "retry":
            outcome = NEXT_RUN
        else:
            state, outcome, applied = "refused", NO_ENGINE, now()
    cur = db.execute(
        "INSERT INTO control_commands (experiment_id, attempt_id, action, args_json, reason, "
        "actor, state, outcome, created_at, applied_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [experiment_id, attempt_id, action, json.dumps(args), reason.strip(), actor, state,
         outcome, now(), applied],
    )
    command = _row(db, int(cur.lastrowid or 0))
    _event(db, command)
    return command


def _data_outcome(db: Database, action: str, attempt_id: int | None) -> str:
    if action == "note":
        return "noted"
    excluded = attempt_id in exclusions_by_attempt(db, _experiment_of(db, attempt_id))
    if action == "exclude":
        return "already excluded" if excluded else "excluded from the analysis"
    return "included in the analysis" if excluded else "already included"


def _experiment_of(db: Database, attempt_id: int | None) -> str:
    row = db.execute("SELECT experiment_id FROM attempts WHERE id = ?", [attempt_id]).fetchone()
    return str(row[0]) if row else ""


def _event(db: Database, command: Command) -> None:
    append_event(
        db,
        EVENT_KIND,
        {"command": command.id, "action": command.action, "state": command.state,
         "outcome": command.outcome},
        experiment_id=command.experiment_id,
        attempt_id=command.attempt_id,
    )


def pending(db: Database, experiment_id: str, owner: str) -> list[Command]:
    """Commands the engine ``owner`` (holding the run lock) has to apply, oldest first: the
    pending ones and those a dead engine claimed and never ended."""
    rows = db.execute(
        f"SELECT {_COLUMNS} FROM control_commands WHERE experiment_id = ? AND (state = "
        "'pending' OR (state = 'applying' AND claimed_by IS NOT ?)) ORDER BY id",
        [experiment_id, owner],
    ).fetchall()
    return [Command(*r) for r in rows]


def claim(db: Database, command_id: int, owner: str) -> bool:
    """Take a command for ``owner``; False when another engine ended or holds it."""
    cur = db.execute(
        "UPDATE control_commands SET state = 'applying', claimed_by = ? WHERE id = ? AND "
        "(state = 'pending' OR (state = 'applying' AND claimed_by IS NOT ?))",
        [owner, command_id, owner],
    )
    if cur.rowcount != 1:
        return False
    _event(db, _row(db, command_id))  # the views show it taken; its time is the claim's
    return True


def mark(db: Database, command_id: int, state: str, outcome: str = "",
         owner: str | None = None) -> bool:
    """End a command (``applied``, ``refused`` or ``failed``) with what happened.

    With ``owner``, only while that engine still holds the claim (False otherwise, and
    nothing is written): the caller writes the action's durable effect in the same
    transaction, so an effect is stored exactly when its mark is.
    """
    if state not in ("applied", "refused", "failed"):
        raise ControlError(f"not an end state: {state!r}")
    sql = ("UPDATE control_commands SET state = ?, outcome = ?, applied_at = ? WHERE id = ? "
           "AND state IN ('pending', 'applying')")
    params: list[Any] = [state, outcome, now(), command_id]
    if owner is not None:
        sql += " AND claimed_by = ?"
        params.append(owner)
    if db.execute(sql, params).rowcount != 1:
        return False
    _event(db, _row(db, command_id))
    return True


def refuse_pending(db: Database, experiment_id: str, outcome: str) -> int:
    """End every command still waiting for an engine (the engine stops); returns how many."""
    ids = [r[0] for r in db.execute(
        "SELECT id FROM control_commands WHERE experiment_id = ? AND state IN "
        "('pending', 'applying') ORDER BY id", [experiment_id]).fetchall()]
    return sum(mark(db, i, "refused", outcome) for i in ids)


# -- readers -------------------------------------------------------------------------------
def command(db: Database, command_id: int) -> Command:
    return _row(db, command_id)


def for_attempt(db: Database, attempt_id: int) -> list[Command]:
    """Every command about one attempt, oldest first (its detail's interventions and notes)."""
    rows = db.execute(
        f"SELECT {_COLUMNS} FROM control_commands WHERE attempt_id = ? ORDER BY id",
        [attempt_id],
    ).fetchall()
    return [Command(*r) for r in rows]


def for_experiment(db: Database, experiment_id: str, *, applied_only: bool = False
                   ) -> list[Command]:
    """Every command of an experiment (``applied_only``: the interventions), oldest first."""
    sql = f"SELECT {_COLUMNS} FROM control_commands WHERE experiment_id = ?"
    if applied_only:
        sql += " AND state = 'applied'"
    rows = db.execute(sql + " ORDER BY id", [experiment_id]).fetchall()
    return [Command(*r) for r in rows]


def exclusions_by_attempt(db: Database, experiment_id: str) -> dict[int, str]:
    """Attempts left out of the analysis → the reason: the latest applied exclude/include
    of each attempt decides (none in a store from before operators' commands)."""
    if not db["control_commands"].exists():
        return {}
    rows = db.execute(
        "SELECT attempt_id, action, reason FROM control_commands WHERE experiment_id = ? AND "
        "state = 'applied' AND action IN ('exclude', 'include') ORDER BY id",
        [experiment_id],
    ).fetchall()
    latest: dict[int, tuple[str, str]] = {}
    for attempt_id, action, reason in rows:
        latest[int(attempt_id)] = (action, reason)
    return {a: why for a, (action, why) in latest.items() if action == "exclude"}


def intervened_attempts(db: Database, experiment_id: str) -> dict[int, list[str]]:
    """Attempts an operator acted on (stop, retry, extend, applied) → those actions."""
    if not db["control_commands"].exists():
        return {}
    rows = db.execute(
        "SELECT attempt_id, action FROM control_commands WHERE experiment_id = ? AND "
        "state = 'applied' AND action IN ('stop', 'retry', 'extend') ORDER BY id",
        [experiment_id],
    ).fetchall()
    out: dict[int, list[str]] = {}
    for attempt_id, action in rows:
        out.setdefault(int(attempt_id), []).append(action)
    return out


def extensions(db: Database, attempt_id: int) -> tuple[float, int]:
    """Extra wall seconds and submissions applied to an attempt (summed over its extends)."""
    seconds, submissions = 0.0, 0
    for c in for_attempt(db, attempt_id):
        if c.action == "extend" and c.state == "applied":
            seconds += float(c.args.get("seconds", 0) or 0)
            submissions += int(c.args.get("submissions", 0) or 0)
    return seconds, submissions
