"""The engine's side of supervision: apply operators' commands (``storage/controls.py``).

The engine holding a run lock polls its experiment's commands every ``POLL_S`` (started with
the lock's heartbeat) and applies each exactly once: it claims the row in one transaction
and writes the action's durable effect in the same transaction as the ``applied`` mark, so a
``kill -9`` between the claim and the effect leaves the row ``applying``, and the next engine
on the experiment applies it (once) before it decides what to run. What each action does:

* ``stop``: a running attempt's task is cancelled (its agent, sandbox and gradings end as on
  an engine stop) and the attempt recorded ``interrupted`` with ``stop_reason``; a run never
  resumes a stopped attempt. An attempt waiting to run is taken out of the run.
* ``retry``: a running attempt is stopped first; the attempt is queued for a new try (same
  plan slot: task, skill, seed); the earlier try's steps and submissions stay under their
  try number and its result is kept in the command's outcome (the link). An attempt its
  grader failed (``ungraded`` with a stored final: ``attempt_records.regrades_final``) has
  that final re-graded instead, its agent not run again (``engine/regrade.py``): the command
  stays ``applying`` until the re-grade's verdict is stored with its ``applied`` mark.
* ``extend``: more submissions (live) or wall minutes (from the attempt's next try: a
  running trial's timeout is fixed when it starts), within the config's ``[control]`` limits.
* ``pause``, ``resume``, ``stop_run``: the engine's own controls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.attempt_records import regrades_final
from engine.attempts.spec import AttemptOutcome, AttemptSpec
from engine.regrade import final_submission
from storage import controls, queries
from storage.controls import Command
from storage.db import now

if TYPE_CHECKING:
    from engine.scheduler import Engine

POLL_S = 0.25  # how often the engine looks for commands (the issue asks ≤ 1 s)
ENGINE_ENDED = "the engine stopped before applying this; run the experiment again to act"
_ENDED = ("finished", "failed", "skipped", "interrupted")
SCHEDULING_ENDED = ("the run starts nothing more (it is finishing or stopping): no re-grade "
                    "can start in it now")


@dataclass
class _Running:
    task: asyncio.Future[AttemptOutcome]
    spec: AttemptSpec
    stop: Command | None = None  # the operator's stop (or retry) that cancelled it


@dataclass
class Control:
    """One engine's command loop and its handles on the attempts it runs."""

    engine: Engine
    poll_s: float = POLL_S
    running: dict[int, _Running] = field(default_factory=dict)
    todo: set[str] = field(default_factory=set)  # the scheduler's set, while it schedules
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # a retry queued an attempt
    # re-grades of stored finals (engine/regrade.py): claimed and waiting for the scheduler,
    # and every attempt with one waiting or under way (a second retry of it is refused)
    regrades: dict[int, Command] = field(default_factory=dict)
    regrading: set[int] = field(default_factory=set)
    woken: asyncio.Future[Any] | None = None  # the scheduler's waiter (see ``waiter``)

    @property
    def owner(self) -> str:
        return self.engine.owner

    # -- the loop ------------------------------------------------------------------------
    async def start(self) -> asyncio.Task[None]:
        """Apply what a killed engine left (before the run decides what to run), then poll."""
        await self.apply_pending()
        return asyncio.create_task(self.poll(), name=f"control-{self.engine.config.id}")

    def waiter(self, todo: set[str]) -> asyncio.Future[Any]:
        """What wakes the scheduler when a retry adds to ``todo`` (its set of keys to run);
        the scheduler cancels the last one when it has started everything it will."""
        self.todo = todo
        todo.update(k for k, i in self.engine.ids.items() if i in self.regrades)
        self.wake.clear()
        self.woken = asyncio.ensure_future(self.wake.wait())
        return self.woken

    async def poll(self) -> None:
        """Apply commands until cancelled (a busy store: try again next time)."""
        while True:
            with contextlib.suppress(Exception):
                await self.apply_pending()
            await asyncio.sleep(self.poll_s)

    async def apply_pending(self) -> int:
        """Claim and apply every waiting command; returns how many were taken."""
        store, exp = self.engine.store, self.engine.config.id
        taken = 0
        for command in await store.read(controls.pending, exp, self.owner):
            if self.engine.lock_lost:
                break
            if not await store.write(controls.claim, command.id, self.owner):
                continue
            taken += 1
            try:
                await self._apply(command)
            except Exception as exc:  # noqa: BLE001 - a bad command must not stop the run
                await store.write(controls.mark, command.id, "failed",
                                  f"{type(exc).__name__}: {exc}", self.owner)
        return taken

    async def end(self, poller: asyncio.Task[None]) -> None:
        """The engine stops: commands still waiting are answered, never left hanging."""
        poller.cancel()
        if self.engine.lock_lost:  # the engine that took over answers them
            return
        with contextlib.suppress(Exception):
            await self.engine.store.write(
                controls.refuse_pending, self.engine.config.id, ENGINE_ENDED
            )

    async def _apply(self, command: Command) -> None:
        action = command.action
        if action in ("pause", "resume", "stop_run"):
            {"pause": self.engine.pause, "resume": self.engine.resume,
             "stop_run": self.engine.stop}[action]()
            await self._mark(command, "applied", f"the run is {action.replace('_run', 'ped')}d"
                             if action != "stop_run" else "the run stops")
            return
        row = await self.engine.store.read(queries.attempt, command.attempt_id or 0)
        if row is None:
            await self._mark(command, "refused", f"no attempt {command.attempt_id}")
            return
        if action == "stop":
            await self._stop(command, row)
        elif action == "retry":
            await self._retry(command, row)
        elif action == "extend":
            await self._extend(command, row)
        else:  # data actions are applied when written; nothing is left to do
            await self._mark(command, "applied", "")

    async def _mark(self, command: Command, state: str, outcome: str) -> bool:
        ok: bool = await self.engine.store.write(
            controls.mark, command.id, state, outcome, self.owner
        )
        return ok

    # -- stop ----------------------------------------------------------------------------
    async def _stop(self, command: Command, row: queries.AttemptRow) -> None:
        handle = self.running.get(row.id)
        if handle is not None and not handle.task.done():
            handle.stop = command  # the supervised task records it as it ends
            handle.task.cancel()
            return
        if row.id in self.regrading:
            await self._mark(command, "refused", f"attempt {row.id}'s final is being re-graded")
            return
        if row.stop_reason is not None:
            await self._mark(command, "refused", f"attempt {row.id} is already stopped")
            return
        if row.state in ("finished", "skipped"):
            await self._mark(command, "refused", f"attempt {row.id} already ended ({row.state})")
            return
        self.todo.discard(row.plan_key)  # waiting to run, or interrupted: it never runs now
        await self.engine.store.write(_stopped, command, self.owner, "stopped before it ran")

    async def supervise(self, spec: AttemptSpec, call: Awaitable[AttemptOutcome]
                        ) -> AttemptOutcome | None:
        """Run one try under the operator's controls; None when an operator stopped it
        (recorded here), else the runner's outcome."""
        task = asyncio.ensure_future(call)
        handle = _Running(task, spec)
        self.running[spec.attempt_id] = handle
        try:
            return await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if handle.stop is None or (me is not None and me.cancelling()):
                raise  # the engine stops (not an operator's stop of this attempt)
            await asyncio.shield(self._record_stop(handle.stop))
            return None
        finally:
            self.running.pop(spec.attempt_id, None)

    async def _record_stop(self, command: Command) -> None:
        if command.action == "retry":
            await self.engine.store.write(_requeued, command, self.owner)
            self._queue(command)
        else:
            await self.engine.store.write(_stopped, command, self.owner, "stopped while running")

    # -- retry ---------------------------------------------------------------------------
    async def _retry(self, command: Command, row: queries.AttemptRow) -> None:
        handle = self.running.get(row.id)
        if handle is not None and not handle.task.done():
            handle.stop = command  # stopped first, then queued (see _record_stop)
            handle.task.cancel()
            return
        if row.state not in _ENDED:
            await self._mark(command, "refused", f"attempt {row.id} is {row.state}: not ended")
            return
        if row.id in self.regrading:
            await self._mark(command, "refused", f"attempt {row.id}'s final is being re-graded")
            return
        final = await self.engine.store.read(final_submission, row.id, row.tries)
        if final is not None and regrades_final(row.state, row.outcome, row.reason):
            # its grader failed: re-grade the stored final (applied when its verdict is in)
            if self.woken is not None and self.woken.cancelled():
                await self._mark(command, "refused", SCHEDULING_ENDED)
                return
            self.regrades[row.id] = command
            self.regrading.add(row.id)
            self._queue(command)
            return
        if await self.engine.store.write(_requeued, command, self.owner):
            self._queue(command)

    def _queue(self, command: Command) -> None:
        key = next((k for k, i in self.engine.ids.items() if i == command.attempt_id), None)
        if key is not None:
            self.todo.add(key)
            self.wake.set()

    # -- extend --------------------------------------------------------------------------
    async def _extend(self, command: Command, row: queries.AttemptRow) -> None:
        config = self.engine.config
        minutes = float(command.args.get("minutes", 0) or 0)
        subs = int(command.args.get("submissions", 0) or 0)
        seconds, extra_subs = await self.engine.store.read(controls.extensions, row.id)
        if seconds / 60 + minutes > config.max_extra_minutes + 1e-9 or (
            extra_subs + subs > config.max_extra_submissions
        ):
            await self._mark(command, "refused", (
                f"beyond the experiment's [control] limits: at most "
                f"{config.max_extra_minutes:g} extra minutes and "
                f"{config.max_extra_submissions} extra submissions per attempt (already "
                f"{seconds / 60:g} min, {extra_subs} submissions)"))
            return
        handle = self.running.get(row.id)
        if handle is None and row.state not in ("planned", "queued", "interrupted"):
            await self._mark(command, "refused", f"attempt {row.id} is not running ({row.state})")
            return
        args = {"seconds": minutes * 60, "submissions": subs}
        if await self.engine.store.write(_extended, command, self.owner, args) and handle:
            handle.spec.max_submissions += subs
            handle.spec.budget_s += int(minutes * 60)

    async def limits(self, spec: AttemptSpec) -> AttemptSpec:
        """A new try's spec with the attempt's applied extensions added."""
        seconds, subs = await self.engine.store.read(controls.extensions, spec.attempt_id)
        spec.budget_s += int(seconds)
        spec.max_submissions += subs
        return spec


# -- the durable effects: each in the transaction of its command's mark --------------------
def _stopped(db: Any, command: Command, owner: str, how: str) -> bool:
    if not controls.mark(db, command.id, "applied", f"the attempt was {how}", owner):
        return False
    db.execute(
        "UPDATE attempts SET state = CASE WHEN state IN ('finished', 'skipped') THEN state "
        "ELSE 'interrupted' END, stop_reason = ?, error = ?, ended_at = coalesce(ended_at, ?), "
        "updated_at = ? WHERE id = ?",
        [command.reason or "stopped by an operator", "stopped by an operator", now(), now(),
         command.attempt_id],
    )
    return True


def _requeued(db: Any, command: Command, owner: str) -> bool:
    row = queries.attempt(db, command.attempt_id or 0)
    assert row is not None
    earlier = {"try": row.tries, "state": row.state, "outcome": row.outcome,
               "reason": row.reason, "speedup": row.speedup, "stop_reason": row.stop_reason}
    outcome = f"try {row.tries + 1} queued; try {row.tries} kept: {json.dumps(earlier)}"
    if not controls.mark(db, command.id, "applied", outcome, owner):
        return False
    db.execute(
        "UPDATE attempts SET state = 'queued', stop_reason = NULL, updated_at = ? WHERE id = ?",
        [now(), command.attempt_id],
    )
    return True


def _extended(db: Any, command: Command, owner: str, args: dict[str, Any]) -> bool:
    outcome = (f"+{args['seconds'] / 60:g} min, +{args['submissions']} submissions "
               "(minutes from the attempt's next try)")
    if not controls.mark(db, command.id, "applied", outcome, owner):
        return False
    db.execute("UPDATE control_commands SET args_json = ? WHERE id = ?",
               [json.dumps(args), command.id])
    return True
