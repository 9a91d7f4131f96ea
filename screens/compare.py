"""The Compare view: two experiments side by side (an experiment and its re-grade, or any two),
from the one comparison ``mkb analyze --compare A B`` prints
(``engine.analysis.stored_compare``): where each side came from and was graded, verdict
agreement with every changed verdict, per-problem speedup log ratios and their rank
correlation, and the paper's tables of both. Sides graded on different devices (or one in CPU
preview) are said to be not comparable in the header."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rich.text import Text
from sqlite_utils import Database
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from engine.analysis.compare import LIFT_FIELDS, SOLO_FIELDS
from engine.analysis.text import fixed, share, signed, speed
from screens.app_bar import AppBar
from screens.base import Changes, LiveScreen, host
from screens.experiment_picker import PREVIEW_STYLE, ExperimentPicker
from screens.fit import Column, available_width, fill, fit
from screens.lift import TUI_DRAWS
from screens.render import VERDICT_STYLES

TABS = {
    "v": ("verdicts", "Verdicts"),
    "p": ("speedups", "Speedups"),
    "s": ("solo", "Solo"),
    "l": ("lift", "Lift"),
    "g": ("ladder", "Ladder"),
}
VERDICT_COLUMNS = ("model", "implementation", "A: verdict reason", "B: verdict reason")
FORMATS: dict[str, Callable[[Any], str]] = {
    "pass_rate": share,
    "gm": speed,
    "r2": share,
    "delta_gm": signed,
    "help_rate": share,
    "harm_rate": share,
}
HEADERS = {
    "n": "n",
    "pass_rate": "P",
    "gm": "GM",
    "r2": "R(2)",
    "delta_gm": "ΔGM",
    "help_rate": "T",
    "harm_rate": "H",
}


def compare_for_view(db: Database, a: str, b: str) -> dict[str, Any]:
    """The comparison the CLI prints, with the TUI's small permutation draw counts."""
    from engine.analysis.report import AnalysisOptions
    from engine.analysis.stored_compare import compare_experiments

    options = AnalysisOptions(
        permutation_draws=TUI_DRAWS["permutation_draws"],
        swap_draws=TUI_DRAWS["swap_draws"],
        bootstrap_draws=TUI_DRAWS["bootstrap_draws"],
    )
    return compare_experiments(db, a, b, options)


def side_line(tag: str, side: dict[str, Any]) -> Text:
    """``A  id (name) · where from · graded on … · PREVIEW / scored``."""
    text = Text(f"{tag}  ", style="bold")
    text.append(f"{side.get('id')} ({side.get('name')})", style="bold")
    devices = ", ".join(side.get("devices") or []) or "no stored grading"
    text.append(f" · {side.get('from') or '-'} · graded on {devices} · ")
    if side.get("preview"):
        text.append("PREVIEW (CPU grading, not comparable)", style=PREVIEW_STYLE)
    else:
        text.append("scored")
    return text


def header(report: dict[str, Any]) -> Text:
    text = Text("\n").join([side_line("A", report["a"]), side_line("B", report["b"])])
    if report["devices_note"]:
        text.append("\n")
        text.append(f"NOT COMPARABLE: {report['devices_note']}", style="bold reverse red")
    return text


def summary(report: dict[str, Any]) -> Text:
    v, s = report["verdicts"], report["speedups"]
    rho = "-" if s["spearman"] is None else f"{s['spearman']:+.3f}"
    text = Text(
        f"Verdicts: {v['agree']} of {v['compared']} agree ({share(v['agreement'])})", style="bold"
    )
    text.append(
        f" · {len(v['changed'])} changed · {len(v['not_regraded'])} not graded in B · "
        f"{v['only_in_b']} finals only in B · same file in {v['same_source']} pairs"
        f" · speedups of {s['n']} both passing: Spearman {rho}"
    )
    if not report["speedups_comparable"]:
        text.append(" (not comparable)", style="bold")
    return text


def _label(row: dict[str, Any]) -> list[Text]:
    """The model, and ``p28 tirx solo_tirx r1 final 1`` (problem, DSL, arm, replicate,
    purpose, number)."""
    what = f"{row.get('problem')} {row.get('dsl')} {row.get('arm')} r{row.get('replicate')}"
    return [Text(str(row.get("model"))), Text(f"{what} {row.get('purpose')} {row.get('n')}")]


def _verdict(side: dict[str, Any]) -> Text:
    verdict = str(side.get("verdict") or "-")
    text = Text(verdict, style=VERDICT_STYLES.get(verdict, ""))
    text.append(f" {side.get('reason') or '-'}")
    return text


def verdict_rows(report: dict[str, Any]) -> list[list[Text]]:
    """Every changed verdict (A's and B's verdict and reason code), then every
    implementation B has not graded; one dim line when all agree."""
    v = report["verdicts"]
    rows = [[*_label(c), _verdict(c["original"]), _verdict(c["regraded"])] for c in v["changed"]]
    rows += [
        [*_label(c), Text("-"), Text(f"not graded: {c.get('why') or '-'}", style="dim")]
        for c in v["not_regraded"]
    ]
    if not rows:
        note = f"all {v['compared']} verdicts agree" if v["compared"] else "nothing to compare"
        rows.append([Text(note, style="dim"), Text(""), Text(""), Text("")])
    return rows


def speedup_rows(report: dict[str, Any]) -> list[list[Text]]:
    dim = "" if report["speedups_comparable"] else "dim"
    return [
        [
            Text(p["problem"]),
            Text(str(p["n"]), justify="right"),
            Text(f"{p['mean_log_ratio']:+.3f}", style=dim, justify="right"),
            Text(f"{p['ratio']:.3f}x", style=dim, justify="right"),
        ]
        for p in report["speedups"]["per_problem"]
    ]


def paired_rows(
    report: dict[str, Any], table: str, keys: Sequence[str], fields: Sequence[str]
) -> list[list[Text]]:
    """A paper table's rows: the key columns, A's figures, B's (· where a side has no such
    row; a PREVIEW side dimmed)."""
    rows = []
    for r in report[table]:
        cells = [Text(str(r[k])) for k in keys]
        for side in ("a", "b"):
            values, dim = r[side], "dim" if report[side]["preview"] else ""
            for name in fields:
                shown = "·" if values is None else FORMATS.get(name, str)(values.get(name))
                cells.append(Text(shown, style=dim, justify="right"))
        rows.append(cells)
    return rows


def ladder_rows(report: dict[str, Any]) -> list[list[Text]]:
    rows = []
    for r in report["ladder"]:
        for part in ("base", "skill", "difference"):
            cells = [Text(str(r["subset"])), Text(part)]
            for side in ("a", "b"):
                fmt = signed if part == "difference" else share
                shown = (
                    "·"
                    if r[side] is None
                    else " ".join(
                        fixed(v, ".1f") if k == "S" else fmt(v) for k, v in r[side][part].items()
                    )
                )
                cells.append(Text(shown, style="dim" if report[side]["preview"] else ""))
            rows.append(cells)
    return rows


def _fill(
    table: DataTable[Any], columns: Sequence[str], rows: list[list[Text]], flexible: int
) -> None:
    """Fit the table to its width as the Lift tab does: the first ``flexible`` columns (names,
    labels) shrink with an ellipsis, the figures never."""
    fitted = [
        Column(f"c{i}", h, min_width=min(len(h), 8) if i < flexible else 0)
        for i, h in enumerate(columns)
    ]
    layout = fit(fitted, rows, available_width(table, len(rows)))
    fill(table, layout, [c.key for c in fitted], rows)


class CompareScreen(LiveScreen):
    """Experiments ``a`` and ``b`` side by side (A's figures, then B's)."""

    HELP = (
        "Two experiments side by side, the same comparison `mkb analyze --compare A B` prints. "
        "The header says where each side came from (run here, restored from a bundle, a "
        "re-grade, an imported run) and where it was graded; sides graded on different "
        "devices, or one in CPU preview (PREVIEW), are marked NOT COMPARABLE. Verdicts lists "
        "every changed verdict with both reason codes (pass and preview count alike) and "
        "what B has not graded; Speedups the mean log(B/A) of the speedups per problem where "
        "both pass, with their Spearman rank correlation; Solo, Lift and Ladder the paper's "
        "tables of A then B (· : no such row on that side). a / b pick another side, w swaps."
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back", id="compare.back"),
        *(
            Binding(key, f"tab('compare-{tab}')", title, show=False, id=f"compare.tab_{tab}")
            for key, (tab, title) in TABS.items()
        ),
        Binding("a", "pick('a')", "Pick A", id="compare.pick_a"),
        Binding("b", "pick('b')", "Pick B", id="compare.pick_b"),
        Binding("w", "swap", "Swap", id="compare.swap"),
        Binding("r", "refresh", "Recompute", id="compare.refresh"),
    ]
    DEFAULT_CSS = """
    CompareScreen #compare-header, CompareScreen #compare-summary {
        height: auto; padding: 0 1; background: $panel; }
    CompareScreen TabbedContent { height: 1fr; }
    CompareScreen DataTable { height: 1fr; }
    """

    def __init__(self, a: str, b: str) -> None:
        super().__init__()
        self.a, self.b = a, b
        self.report: dict[str, Any] | None = None
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield AppBar()
        yield Static(id="compare-header", markup=False)
        yield Static(id="compare-summary", markup=False)
        with TabbedContent(initial="compare-verdicts", id="compare-tabs"):
            for key, (tab, title) in TABS.items():
                with TabPane(f"{title} ({key})", id=f"compare-{tab}"):
                    yield DataTable(
                        id=f"compare-{tab}-table", cursor_type="row", zebra_stripes=True
                    )
        yield Footer()

    def on_mount(self) -> None:
        host(self).changes.subscribe(self, self.on_changes)
        self.query_one("#compare-verdicts-table", DataTable).focus()
        self.load()

    @work(exclusive=True, group="compare-load", exit_on_error=False)
    async def load(self) -> None:
        self.query_one("#compare-summary", Static).update(
            Text(f"comparing {self.a} with {self.b}…", style="dim")
        )
        try:
            self.report, self.error = await host(self).read(compare_for_view, self.a, self.b), None
        except Exception as exc:  # noqa: BLE001 - an experiment gone, a store error: say so
            self.report, self.error = None, f"cannot compare {self.a} with {self.b}: {exc}"
        self.show()

    def show(self) -> None:
        report = self.report
        if report is None:
            self.query_one("#compare-header", Static).update(Text(self.error or "", style="red"))
            self.query_one("#compare-summary", Static).update("")
            for table in self.query(DataTable):
                table.clear(columns=True)
            return
        self.query_one("#compare-header", Static).update(header(report))
        self.query_one("#compare-summary", Static).update(summary(report))
        self._fill("verdicts", VERDICT_COLUMNS, verdict_rows(report), flexible=4)
        self._fill(
            "speedups", ("problem", "n", "mean log(B/A)", "ratio B/A"), speedup_rows(report), 1
        )
        solo = [f"{s} {HEADERS[f]}" for s in "AB" for f in SOLO_FIELDS]
        self._fill(
            "solo",
            ("model", "DSL", *solo),
            paired_rows(report, "solo", ("model", "dsl"), SOLO_FIELDS),
            flexible=1,
        )
        lift = [f"{s} {HEADERS[f]}" for s in "AB" for f in LIFT_FIELDS]
        self._fill(
            "lift",
            ("model", "direction", "family", *lift),
            paired_rows(report, "lift", ("model", "direction", "family"), LIFT_FIELDS),
            flexible=3,
        )
        self._fill(
            "ladder",
            ("subset", "arm", "A: R@0 R@0.5 R@1 R@2 R@4 S", "B: R@0 R@0.5 R@1 R@2 R@4 S"),
            ladder_rows(report),
            flexible=1,
        )

    def _fill(
        self, tab: str, columns: Sequence[str], rows: list[list[Text]], flexible: int
    ) -> None:
        _fill(self.query_one(f"#compare-{tab}-table", DataTable), columns, rows, flexible)

    def on_resize(self, event: events.Resize) -> None:
        if self.report is not None:
            self.call_after_refresh(self.show)

    def on_changes(self, changes: Changes) -> None:
        if changes.comparisons or changes.experiments:
            self.reload_or_defer()

    def action_refresh(self) -> None:
        self.load()

    def action_swap(self) -> None:
        self.a, self.b = self.b, self.a
        self.load()

    def action_pick(self, side: str) -> None:
        """Another experiment for side ``a`` or ``b`` (the small picker)."""
        other = self.b if side == "a" else self.a

        def chosen(experiment_id: str | None) -> None:
            if experiment_id:
                setattr(self, side, experiment_id)
                self.load()

        title = f"Side {side.upper()}: compare with {other}"
        self.app.push_screen(ExperimentPicker(title, exclude=other), chosen)

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        table = self.main_scrollable()
        if table is not None:
            table.focus()

    def main_scrollable(self) -> Widget | None:
        pane = self.query_one(TabbedContent).active_pane
        found = pane.query(DataTable) if pane is not None else None
        return found.first() if found else None
