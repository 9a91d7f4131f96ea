"""The Textual App: owns the store (or a read-only view of it) and the engine, and turns
engine events into batched ``changes`` signals that screens subscribe to.

Two sources feed the same :class:`~screens.base.ChangeCollector`: the owned engine's
:class:`~engine.events.EventBus` (low latency) and a tail of the ``events`` table (every
``poll_interval`` seconds; the only source in ``--attach`` mode, where another process runs
the engine). A timer publishes at most one :class:`~screens.base.Changes` per
``redraw_interval``, so a burst of 500 events costs one redraw per screen.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from textual import events
from textual.app import App, ScreenStackError
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.reactive import reactive
from textual.signal import Signal
from textual.worker import Worker, WorkerState

from app.control import ControlClient, user
from engine.config import ExperimentConfig, parse_config
from engine.events import Area, Event, EventBus, area_of
from screens.attempt_detail import AttemptDetailScreen
from screens.attempts import AttemptsScreen
from screens.base import ChangeCollector, Changes
from screens.experiments import ExperimentsScreen
from screens.help import HelpScreen
from screens.launch import LaunchScreen
from screens.lift import LiftScreen
from screens.live_reply import LiveReplies, LiveReply
from screens.palette import JumpProvider
from screens.rubric import RubricScreen
from screens.transfer import TransferScreen
from storage import queries, writes
from storage.db import resolve_path
from storage.readers import ReadOnlyReader
from storage.run_locks import ExperimentBusyError
from storage.sanitize import clean, clean_text

T = TypeVar("T")
ENGINE_SHUTDOWN_S = 30.0  # how long quitting waits for running attempts to be cancelled
TYPEAHEAD_S = 1.0  # keys typed up to this long before a mode switch took effect follow it
SCREENS_DIR = Path(__file__).resolve().parents[1] / "screens"


class ReadOnlyError(RuntimeError):
    """An action that writes was asked of a read-only (attached) view."""


def toml_string(text: str) -> str:
    """A TOML basic string for any text (JSON escapes are valid TOML escapes)."""
    return json.dumps(text, ensure_ascii=False)


def edited_transfer_config(
    experiment: queries.ExperimentRow, comparison: queries.ComparisonRow, skill_text: str
) -> ExperimentConfig:
    """The experiment's config plus an ``edited_skill`` edge, narrowed to one model/problem.

    Runs are convergent, so only the new edited-skill treatment (a new plan variant) runs;
    the solo attempts it compares against are reused.
    """
    if not experiment.config_toml.strip():
        raise ValueError(f"experiment {experiment.id} has no stored config to extend")
    edge = (
        "\n\n[[transfers]]\nkind = \"edited_skill\"\n"
        f"problem = {toml_string(comparison.problem_id)}\n"
        f"direction = {toml_string(comparison.direction)}\n"
        f"model = {toml_string(comparison.model)}\n"
        f"skill_text = {toml_string(skill_text)}\n"
    )
    config = parse_config(experiment.config_toml.rstrip() + edge, f"<experiment {experiment.id}>")
    return dataclasses.replace(
        config,
        problems=(comparison.problem_id,),
        families=(),
        models=tuple(m for m in config.models if m.name == comparison.model),
        transfers=(config.transfers[-1],),  # the edge just added
    )


class MkbApp(App[int]):
    """MetaKernelBench: launch, watch and inspect experiments."""

    TITLE = "MetaKernelBench"
    CSS_PATH = str(SCREENS_DIR / "app.tcss")
    MODES: ClassVar[dict[str, Any]] = {
        "attempts": AttemptsScreen,
        "lift": LiftScreen,
        "launch": LaunchScreen,
        "rubric": RubricScreen,
    }
    DEFAULT_MODE = "attempts"
    SCREENS: ClassVar[dict[str, Any]] = {"experiments": ExperimentsScreen}  # key e, everywhere
    COMMANDS = App.COMMANDS | {JumpProvider}
    # the mode keys are shown in the title bar (AppBar), so the footer keeps its room for
    # the keys of the screen on top
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "switch_mode('attempts')", "Attempts", show=False, id="app.attempts"),
        Binding("2", "switch_mode('lift')", "Lift", show=False, id="app.lift"),
        Binding("3", "switch_mode('launch')", "Launch", show=False, id="app.launch"),
        Binding("4", "switch_mode('rubric')", "Rubric", show=False, id="app.rubric"),
        # the footer shows f1: a text field takes "?" as text (and hides it from the footer)
        Binding("f1", "help", "Help", id="app.help"),
        Binding("question_mark", "help", "Help", show=False, id="app.help_key"),
    ]

    engine_state: reactive[str] = reactive("idle")

    def __init__(
        self,
        db_path: str | os.PathLike[str] | None = None,
        *,
        attach: bool = False,
        clock: Callable[[], datetime] | None = None,
        poll_interval: float = 0.5,
        redraw_interval: float = 0.25,
        theme: str | None = None,
        browser: bool = False,
    ) -> None:
        super().__init__()
        self.db_path = resolve_path(db_path)
        self.read_only = attach
        self.controls = ControlClient.for_app(self.db_path, browser=browser)  # app/control.py
        self._clock = clock or (lambda: datetime.now(UTC))
        self.poll_interval = poll_interval
        self.redraw_interval = redraw_interval
        self.changes: Signal[Changes] = Signal(self, "changes")
        self.collector = ChangeCollector()
        self.replies: Signal[frozenset[int]] = Signal(self, "replies")  # attempts' live text
        self.live_replies = LiveReplies()
        self.experiment_id: str | None = None
        self.last_event_id = 0
        self.engine: Any = None
        self.engine_worker: Worker[Any] | None = None
        self._engine_done: asyncio.Event | None = None  # set when the engine run has ended
        self._pending_start: tuple[Callable[[], ExperimentConfig], str] | None = None
        self.painted = False  # the first frame is on screen
        self.redraws = 0
        if attach:
            self.store: Any = None
            self._reader: Any = ReadOnlyReader(self.db_path)
        else:
            from storage.store import Store

            self.store = Store(self.db_path)
            self._reader = self.store
        # known before any screen loads: the newest experiment and where the event tail starts
        experiments = self._reader.read_sync(queries.experiments)
        self.experiment_id = experiments[0].id if experiments else None
        self.last_event_id = self._reader.read_sync(queries.last_event_id)
        if theme:
            self.theme = theme
        if attach:
            self.sub_title = f"{self.db_path.name} ({self.controls.mode})"
        else:
            self.sub_title = self.db_path.name

    # -- services for screens --------------------------------------------------------------
    def now(self) -> datetime:
        return self._clock()

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a query off the UI loop; every string in the result is made safe to show.

        This is the one way screens (and the browser view, the same App) read the store,
        so agent-written text never reaches a widget with terminal control sequences in it.
        """
        result: T = await self._reader.read(_read_clean, fn, *args, **kwargs)
        return result

    def notify(
        self, message: str, *, title: str = "", severity: SeverityLevel = "information",
        timeout: float | None = None, markup: bool = True,
    ) -> None:
        """A toast, always plain text: messages quote errors that can hold agent text."""
        super().notify(clean_text(message), title=clean_text(title), severity=severity,
                       timeout=timeout, markup=False)

    def _require_writable(self) -> None:
        if self.read_only or self.store is None:
            raise ReadOnlyError("this view is attached read-only; run `mkb tui` without "
                                "--attach to change anything")

    async def add_human_label(
        self, *, task: str, subject_type: str, subject_id: int, category: str, value: str,
        evidence: str = "", rubric_hash: str = "",
    ) -> None:
        self._require_writable()
        await self.store.write(
            writes.add_label, task=task, subject_type=subject_type, subject_id=subject_id,
            category=category, value=value, evidence=evidence, annotator=user(),
            annotator_kind="human", rubric_hash=rubric_hash,
        )
        self.collector.add("label_added", None)

    async def save_edited_skill(self, text: str, parent_skill_id: int | None) -> int:
        self._require_writable()
        skill_id: int = await self.store.write(
            writes.add_skill, text, kind="edited", author=user(), parent_skill_id=parent_skill_id
        )
        self.collector.add("skill_updated", None)
        return skill_id

    async def launch_edited_transfer(self, comparison_id: int, skill_text: str) -> str:
        """Run the comparison's treatment again with a person's skill; returns the variant."""
        self._require_writable()
        comparison = await self.read(queries.comparison, comparison_id)
        if comparison is None:
            raise ValueError(f"no comparison {comparison_id}")
        experiment = await self.read(queries.experiment, comparison.experiment_id)
        if experiment is None:
            raise ValueError(f"no experiment {comparison.experiment_id}")
        config = edited_transfer_config(experiment, comparison, skill_text)
        self.start_experiment(config)
        return config.id

    def act(self, action: str, attempt_id: int | None = None, **given: Any) -> None:
        """An operator's action: a command the run's engine applies (``app/control.py``)."""
        work = self.controls.act(self.experiment_id, action, self.notify, attempt_id, **given)
        self.run_worker(work, exit_on_error=False, group="control")

    # -- engine ----------------------------------------------------------------------------
    def start_experiment(self, config: ExperimentConfig) -> None:
        """Run ``config`` in an App-owned worker (survives screen changes).

        The engine (the agent stack's imports, the grader, the plan over the catalog) is
        built on a thread inside the worker, so the UI keeps painting meanwhile.
        """
        self._require_writable()
        if self.engine_state in ("running", "paused", "stopping"):
            raise RuntimeError("an experiment is already running; stop it first")
        self.engine = None
        self.show_experiment(config.id)  # screens switch to the launched experiment
        self.engine_state = "running"
        self._engine_done = asyncio.Event()
        self.engine_worker = self.run_worker(
            self._run_engine(config, self._engine_done), name="engine", group="engine",
            exit_on_error=False, description=f"experiment {config.id}",
        )

    def _build_engine(self, config: ExperimentConfig) -> tuple[Any, Any]:
        """The engine and its grading backend for ``config`` (slow: runs on a thread)."""
        from engine.factory import make_backend, make_runner
        from engine.scheduler import Engine

        backend = make_backend(config)
        runner = make_runner(config)
        preview = bool(getattr(backend, "preview", False)) or config.grading == "simulated"
        bus = EventBus()
        bus.subscribe(self._on_engine_event)
        engine = Engine(self.store, config, runner, backend, bus=bus, preview=preview)
        return engine, backend

    async def _run_engine(self, config: ExperimentConfig, done: asyncio.Event) -> Any:
        try:
            engine, backend = await asyncio.to_thread(self._build_engine, config)
            try:
                self.engine = engine
                if self.engine_state == "stopping":  # stopped while it was being built
                    return None
                if self.engine_state == "paused":
                    engine.pause()
                return await engine.run()
            finally:
                await backend.close()
        finally:
            done.set()

    def pause_engine(self) -> None:
        if self.engine_state == "running":
            if self.engine is not None:  # else: paused as soon as it is built
                self.engine.pause()
            self.engine_state = "paused"

    def resume_engine(self) -> None:
        if self.engine_state == "paused":
            if self.engine is not None:
                self.engine.resume()
            self.engine_state = "running"

    def stop_engine(self) -> None:
        if self.engine_state in ("running", "paused"):
            if self.engine is not None:  # else: never run once it is built
                self.engine.stop()
            self.engine_state = "stopping"

    def grading_status(self) -> str | None:
        engine = self.engine
        if engine is None or self.engine_state == "idle":
            return None
        gate = engine.gate
        line = f"grading {gate.in_flight}/{gate.slots} busy, {gate.waiting} waiting"
        config = getattr(engine, "config", None)
        if getattr(config, "grading", None) == "ray":  # the cluster: nodes, GPUs, graders
            from engine.events import RayStatus

            line += " · ray " + RayStatus.from_status("", engine.backend.status()).summary
        return line

    def live_reply(self, attempt_id: int) -> LiveReply | None:
        """The reply the attempt's model is streaming (cleaned), until its step is stored."""
        return self.live_replies.get(attempt_id)

    def _on_engine_event(self, event: Event) -> None:
        if not self.live_replies.absorb(event):  # streamed text: nothing stored to re-read
            self.collector.add(event.kind, event.attempt_id)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if worker.group == "engine" and worker.state in (
            WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED
        ):
            self.engine_state = "idle"
            self.collector.mark_everything()
            if isinstance(worker.error, ExperimentBusyError):  # run by another process
                self.notify(str(worker.error), title="already running", severity="warning",
                            timeout=20)
            elif worker.state == WorkerState.ERROR:
                self.notify(f"experiment failed: {worker.error}", severity="error", timeout=10)
            elif worker.state == WorkerState.SUCCESS and worker.result is not None:
                s = worker.result
                self.notify(f"experiment {s.experiment_id}: {s.ran} ran, {s.reused} reused, "
                            f"{s.skipped} skipped", title="finished")
        elif worker.state == WorkerState.ERROR and worker.group != "engine":
            self.notify(f"{worker.name or 'worker'}: {worker.error}", severity="error",
                        timeout=8)

    def start_when_ready(self, make_config: Callable[[], ExperimentConfig],
                         message: str = "") -> None:
        """Start the experiment ``make_config()`` builds once the first frame is on screen
        (the config is built on a thread: parsing checks the catalog, which imports torch)."""
        self._pending_start = (make_config, message)

    def on_ready(self) -> None:
        self.painted = True
        # What start-up built (modules, classes, widgets: ~130,000 objects) lives as long as
        # the App: leave it out of the cyclic collector, whose full passes over it stopped
        # the UI loop for 50-180 ms about once a second under a steady event stream
        # (docs/benchmarks.md). on_unmount hands it back.
        gc.freeze()
        if self._pending_start is not None:
            self.run_worker(self._start_pending(*self._pending_start), name="start",
                            exit_on_error=False)
            self._pending_start = None

    async def _start_pending(self, make_config: Callable[[], ExperimentConfig],
                             message: str) -> None:
        config = await asyncio.to_thread(make_config)
        self.start_experiment(config)
        if message:
            self.notify(message, title=config.name)

    # -- bridge ----------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.set_interval(self.redraw_interval, self.flush_changes, name="redraw")
        self.run_worker(self._tail_events(), name="tail", group="tail", exit_on_error=False)

    def flush_changes(self) -> None:
        """Publish the changes gathered since the last redraw (at most one per interval)."""
        if self.collector.dirty:
            self.redraws += 1
            self.changes.publish(self.collector.take())
        replies = self.live_replies.take_updated()
        if replies:
            self.replies.publish(replies)

    async def poll_events_once(self) -> int:
        rows = await self.read(queries.events_after, self.last_event_id, limit=5000)
        for row in rows:
            if area_of(row.kind) is Area.EXPERIMENTS and row.experiment_id and (
                self.experiment_id is None
            ):
                self.experiment_id = row.experiment_id
            self.collector.add(row.kind, row.attempt_id)
        if rows:
            self.last_event_id = rows[-1].id
        return len(rows)

    async def _tail_events(self) -> None:
        while True:
            try:
                while await self.poll_events_once() >= 5000:
                    pass
            except Exception as exc:  # noqa: BLE001 - a locked or vanished DB must not kill the UI
                self.log.warning(f"event tail: {exc}")
            await asyncio.sleep(self.poll_interval)

    # -- navigation ------------------------------------------------------------------------
    async def action_switch_mode(self, mode: str) -> None:
        self._switched_at = time.monotonic()  # Textual's event clock (Linux, macOS)
        await super().action_switch_mode(mode)

    def on_key(self, event: events.Key) -> None:
        """Type-ahead after a mode key: keys typed before the switch took effect were sent
        to the screen being left (the switch happens as the mode key bubbles back up here),
        and come back unused. They are sent again, to the new screen, once it has painted
        (and focused its first field)."""
        switched = getattr(self, "_switched_at", 0.0)
        if event.is_printable and switched - TYPEAHEAD_S < event.time < switched:
            event.prevent_default()  # not a key binding of the screen it was typed for
            self.call_after_refresh(self.post_message, events.Key(event.key, event.character))

    async def action_help(self) -> None:
        """The keys of the screen on top (``?`` / F1 again, or escape, closes it)."""
        if not isinstance(self.screen, HelpScreen):
            await self.push_screen(HelpScreen(self.screen))

    def open_attempt(self, attempt_id: int) -> None:
        self.push_screen(AttemptDetailScreen(attempt_id))

    def open_comparison(self, comparison_id: int) -> None:
        self.push_screen(TransferScreen(comparison_id))

    def show_problem(self, problem_id: str) -> None:
        """The Attempts screen (top of its mode) filtered to one problem."""
        self.run_worker(self._show_problem(problem_id), exit_on_error=False)

    async def _show_problem(self, problem_id: str) -> None:
        await self.switch_mode("attempts")
        while len(self.screen_stack) > 1:
            await self.pop_screen()
        screen = self.screen
        if isinstance(screen, AttemptsScreen):
            screen.set_filter(f"problem:{problem_id}")

    def select_experiment(self, experiment_id: str) -> None:
        self.show_experiment(experiment_id)
        self.flush_changes()

    def show_experiment(self, experiment_id: str) -> None:
        """Make ``experiment_id`` the one every screen shows.

        Modes not on screen forget the screens drilled into the old experiment (an attempt,
        a comparison list, a comparison), so switching to them shows the new experiment's
        base screen; the mode on screen stays as the user sees it.
        """
        changed = experiment_id != self.experiment_id
        self.experiment_id = experiment_id
        self.collector.mark_everything()
        if not changed:
            return
        for mode, base in self.MODES.items():
            # Textual (pinned) has no public view of another mode's stack
            if mode != self.current_mode and len(self._screen_stacks.get(mode, ())) > 1:
                self.remove_mode(mode)
                self.add_mode(mode, base)

    def clear_selection(self) -> None:
        # Textual 8.2.8 in a real terminal: an Input on the first mode's screen can mount
        # before that screen is on the stack, and the base method only tolerates NoScreen.
        with contextlib.suppress(ScreenStackError):
            super().clear_selection()

    async def action_quit(self) -> None:
        await self.shutdown_engine()
        self.exit(0)

    async def shutdown_engine(self, timeout: float = ENGINE_SHUTDOWN_S) -> None:
        """Stop an owned engine and wait (at most ``timeout``) until it has recorded its
        running attempts as interrupted; the next run resumes them."""
        done = self._engine_done
        if done is None or done.is_set():
            return
        self.stop_engine()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout)

    async def on_unmount(self) -> None:
        await self.shutdown_engine()  # any way out: the store must say what happened
        if self.store is not None:
            self.store.close()
        else:
            self._reader.close()
        gc.unfreeze()  # what on_ready froze can be collected again once the App is gone


def _read_clean[R](db: Any, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """``fn(db, ...)`` with its strings cleaned, on the reading thread (not the UI loop)."""
    return clean(fn(db, *args, **kwargs))

