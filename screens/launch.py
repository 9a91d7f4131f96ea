"""Launch: pick a config file, narrow models / problems / families / DSLs / replicates,
preview the plan (dry run), then start, pause, resume or stop the engine (the App owns it)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Button, Footer, Input, Label, SelectionList, Static

from screens.app_bar import AppBar
from screens.base import PagedScreen, host

FAMILIES = ("Attention", "KV Cache", "MLP & Norm", "MoE", "Quantization", "Linear Attention")


@dataclasses.dataclass(frozen=True)
class LaunchChoices:
    models: tuple[str, ...]
    problems: tuple[str, ...]
    families: tuple[str, ...]
    dsls: tuple[str, ...]
    replicates: int


def narrow(config: Any, choices: LaunchChoices) -> Any:
    """The config restricted to the choices (validated by building its plan)."""
    if not choices.models:
        raise ValueError("choose at least one model")
    if not choices.dsls:
        raise ValueError("choose at least one DSL")
    if choices.replicates < 1:
        raise ValueError("replicates must be ≥ 1")
    return dataclasses.replace(
        config,
        models=tuple(m for m in config.models if m.name in choices.models),
        problems=choices.problems,
        families=choices.families,
        dsls=choices.dsls,
        replicates=choices.replicates,
    )


def plan_preview(config: Any) -> str:
    from engine.plan import build_plan, describe

    try:
        plan = build_plan(config)
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from exc
    if not plan.nodes:
        raise ValueError("no attempts: nothing matches the selection")
    return describe(plan)


PAUSED_NOTE = ("paused: running attempts go on, no new attempt starts until you resume "
               "(ctrl+t or Resume)")


class LaunchScreen(PagedScreen):
    """Configure and control an experiment run."""

    CSS_PATH = "launch.tcss"
    MODE = "launch"
    # Focus the config path as the screen is shown: with the default ("*") the form's scroll
    # view took focus first, and the keys typed right after `3` went to it and were lost.
    AUTO_FOCUS = "#config-path"
    HELP = ("Load a config, narrow it, then Dry run to see the plan before Start. The App owns "
            "the engine: it keeps running while you browse other screens. esc leaves a field "
            "so the mode keys work; PageUp / PageDown page the plan.")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+l", "load_config", "Load", id="launch.load"),
        Binding("ctrl+r", "preview", "Dry run", id="launch.preview"),
        Binding("ctrl+g", "start", "Start", id="launch.start"),
        Binding("ctrl+t", "pause", "Pause/resume", id="launch.pause"),
        Binding("ctrl+x", "stop", "Stop", id="launch.stop"),
        Binding("escape", "leave_field", "Leave field", show=False, id="launch.leave_field"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.config: Any = None

    def compose(self) -> ComposeResult:
        yield AppBar()
        with Horizontal(id="launch-body"):
            with VerticalScroll(id="launch-form"):
                yield Label("Experiment config (TOML)")
                with Horizontal(classes="row"):
                    yield Input(placeholder="path/to/experiment.toml", id="config-path")
                    yield Button("Load", id="load-config")
                yield Label("Models")
                yield SelectionList[str](id="launch-models")
                yield Label("Problems (ids or globs; empty = config's)")
                yield Input(id="launch-problems")
                yield Label("Families (none = all)")
                yield SelectionList[str](*((f, f) for f in FAMILIES), id="launch-families")
                yield Label("DSLs")
                yield SelectionList[str](("cute", "cute", True), ("tirx", "tirx", True),
                                         id="launch-dsls")
                yield Label("Replicates")
                yield Input("1", type="integer", id="launch-replicates")
            with Vertical(id="launch-side"):
                yield Static(id="engine-state", markup=False)
                with Horizontal(id="launch-buttons"):  # always in view, whatever the height
                    yield Button("Dry run", id="preview", compact=True)
                    yield Button("Start", variant="success", id="start", compact=True)
                    yield Button("Pause", id="pause", compact=True)
                    yield Button("Stop", variant="error", id="stop", compact=True)
                with VerticalScroll(id="plan-scroll"):
                    yield Static(id="plan-preview", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#config-path", Input).focus()
        self.watch(self.app, "engine_state", self.show_engine_state)
        if host(self).read_only:
            self.query_one("#plan-preview", Static).update(
                Text("attached: launching is disabled in this view; pause, resume and stop "
                     "(ctrl+t, ctrl+x) go to the run's engine", style="yellow"))

    def action_leave_field(self) -> None:
        """Unfocus the form so the mode keys (1–4) work again."""
        self.set_focus(None)

    def main_scrollable(self) -> Widget | None:
        return self.query_one("#plan-scroll", VerticalScroll)

    def show_engine_state(self, state: str) -> None:
        exp = host(self).experiment_id or "-"
        text = Text(f"engine: {state} · experiment {exp}",
                    style="bold green" if state == "running" else "bold")
        if state == "paused":  # cleared as soon as the run resumes
            text.append(f"\n{PAUSED_NOTE}", style="yellow")
        self.query_one("#engine-state", Static).update(text)
        self.query_one("#pause", Button).label = "Resume" if state == "paused" else "Pause"

    # -- config ----------------------------------------------------------------------------
    @on(Button.Pressed, "#load-config")
    @on(Input.Submitted, "#config-path")
    def action_load_config(self) -> None:
        self.load_config(self.query_one("#config-path", Input).value.strip())

    @work(exclusive=True, group="launch-load", exit_on_error=False)
    async def load_config(self, path: str) -> None:
        from engine.config import ConfigError, load_config

        if not path:
            self.show_error("give a config file path")
            return
        try:
            config = await asyncio.to_thread(load_config, path, check_problems=False)
        except ConfigError as exc:
            self.show_error(str(exc))
            return
        self.config = config
        models = self.query_one("#launch-models", SelectionList)
        models.clear_options()
        models.add_options([(m.name, m.name, True) for m in config.models])
        self.query_one("#launch-problems", Input).value = ", ".join(config.problems)
        families = self.query_one("#launch-families", SelectionList)
        families.deselect_all()
        for fam in config.families:
            if fam in FAMILIES:
                families.select(fam)
        dsls = self.query_one("#launch-dsls", SelectionList)
        dsls.deselect_all()
        for dsl in config.dsls:
            dsls.select(dsl)
        self.query_one("#launch-replicates", Input).value = str(config.replicates)
        self.query_one("#plan-preview", Static).update(
            Text(f"loaded {config.name} ({config.id}): agent {config.agent}, grading "
                 f"{config.grading}; press Dry run"))

    def choices(self) -> LaunchChoices:
        problems = tuple(p.strip() for p in self.query_one("#launch-problems", Input).value
                         .split(",") if p.strip())
        replicates_text = self.query_one("#launch-replicates", Input).value.strip() or "1"
        return LaunchChoices(
            models=tuple(self.query_one("#launch-models", SelectionList).selected),
            problems=problems,
            families=tuple(self.query_one("#launch-families", SelectionList).selected),
            dsls=tuple(self.query_one("#launch-dsls", SelectionList).selected),
            replicates=int(replicates_text),
        )

    def narrowed(self) -> Any:
        if self.config is None:
            raise ValueError("load a config first")
        return narrow(self.config, self.choices())

    def show_error(self, message: str) -> None:
        self.query_one("#plan-preview", Static).update(Text(message, style="red"))

    # -- actions ---------------------------------------------------------------------------
    @on(Button.Pressed, "#preview")
    def action_preview(self) -> None:
        self.preview()

    @work(exclusive=True, group="launch-preview", exit_on_error=False)
    async def preview(self) -> None:
        from engine.analysis.power_store import expected_power

        try:
            config = self.narrowed()
            text = await asyncio.to_thread(plan_preview, config)
        except ValueError as exc:
            self.show_error(str(exc))
            return
        power = await host(self).read(expected_power, config)  # from a pilot in this store
        counts, _, attempts = text.partition("\n")
        self.query_one("#plan-preview", Static).update(Text(f"{counts}\n{power}\n{attempts}"))

    @on(Button.Pressed, "#start")
    def action_start(self) -> None:
        self.start()

    @work(exclusive=True, group="launch-preview", exit_on_error=False)
    async def start(self) -> None:
        try:
            config = self.narrowed()
            text = await asyncio.to_thread(plan_preview, config)
            self.app.start_experiment(config)  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - shown to the user
            self.show_error(str(exc))
            return
        self.query_one("#plan-preview", Static).update(Text("started\n" + text))
        self.show_engine_state(self.app.engine_state)  # type: ignore[attr-defined]

    @on(Button.Pressed, "#pause")
    def action_pause(self) -> None:
        app: Any = self.app
        if app.engine_state == "idle":  # the run's engine is another process's: a command
            self._remote_paused = not getattr(self, "_remote_paused", False)
            app.act("pause" if self._remote_paused else "resume")
        elif app.engine_state == "paused":
            app.resume_engine()
        else:
            app.pause_engine()

    @on(Button.Pressed, "#stop")
    def action_stop(self) -> None:
        app: Any = self.app
        if app.engine_state == "idle":  # another process's engine: ask it to stop the run
            app.act("stop_run")
        else:
            app.stop_engine()
