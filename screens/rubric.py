"""Rubric views for the current experiment (``engine.rubric.views.report``): skill-category
prevalence in helped vs harmed comparisons, uptake and propagation by transfer outcome,
primary failure causes, uptake vs lift, annotator agreement and label usage.

Labels are resolved per item (a human label wins over LLM labels). The annotator writes LLM
labels; human labels come from the transfer inspector (key ``l``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from sqlite_utils import Database
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from screens.app_bar import AppBar
from screens.base import Changes, LiveScreen, host
from screens.fit import Column, available_width, fill, fit
from screens.render import pct, signed_pct
from screens.rubric_terms import UPTAKE_VALUES

# tab id → (title, column names); the uptake columns follow the rubric's ratings
TABS: dict[str, tuple[str, tuple[str, ...]]] = {
    "prevalence": ("Prevalence", ("model", "category", "helped", "n helped", "harmed",
                                  "n harmed", "harmed − helped")),
    "uptake": ("Uptake", ("model", "outcome", "n", *UPTAKE_VALUES, "followed",
                          "propagation", "n prop.")),
    "causes": ("Failure causes", ("model", "cause", "count", "share of comparisons",
                                  "harmed", "labelled", "no failure")),
    "lift": ("Uptake vs lift", ("model", "family", "N", "rated", "followed fully", "ΔGM")),
    "agreement": ("Agreement", ("task", "category", "annotator A", "annotator B", "n",
                                "agree", "κ")),
    "usage": ("Labels", ("task", "annotator", "kind", "labels", "tokens in", "tokens out",
                         "cost")),
}
# headers when a table is too wide for the terminal (screens.fit)
SHORT = {"followed fully": "fully", "followed partially": "partly", "contradicted": "contra.",
         "not applicable": "n/a", "followed": "follow.", "propagation": "prop.",
         "harmed − helped": "Δ pts", "share of comparisons": "share", "no failure": "none",
         "annotator A": "A", "annotator B": "B", "tokens in": "in", "tokens out": "out"}
FLEXIBLE = {"model": 8, "category": 10, "cause": 10, "annotator": 8, "annotator A": 6,
            "annotator B": 6}
TAB_KEYS = {"prevalence": "p", "uptake": "u", "causes": "c", "lift": "v", "agreement": "a",
            "usage": "b"}  # one key per tab (the Labels tab: b, as in laBels)


def rubric_report(db: Database, experiment_id: str | None) -> dict[str, Any]:
    """Every rubric view for one experiment (all labels when ``experiment_id`` is None)."""
    from engine.rubric.views import report

    return report(db, experiment_id=experiment_id)


def _num(value: Any) -> Text:
    return Text(str(value), justify="right")


def _share(value: float | None) -> Text:
    return Text(pct(value), justify="right")


def _points(value: float | None) -> Text:
    if value is None:
        return Text("-", justify="right")
    style = "red" if value > 0 else "green" if value < 0 else ""
    return Text(f"{value:+.1f} pts", style=style, justify="right")


def _delta(value: float | None) -> Text:
    style = "" if value is None else ("green" if value > 0 else "red" if value < 0 else "")
    return Text(signed_pct(value), style=style, justify="right")


def _fixed(value: float | None, fmt: str) -> Text:
    return Text("-" if value is None else format(value, fmt), justify="right")


def table_rows(data: dict[str, Any]) -> dict[str, list[list[Text]]]:
    """The cells of every tab's table, from a :func:`rubric_report` dict."""
    prevalence = [
        [Text(r["model"]), Text(r["category"]), _share(r["helped_share"]), _num(r["helped_n"]),
         _share(r["harmed_share"]), _num(r["harmed_n"]), _points(r["harmed_minus_helped_pts"])]
        for r in data["prevalence"] if r["helped_n"] or r["harmed_n"]
    ]
    uptake = [
        [Text(r["model"]), Text(r["outcome"]), _num(r["n"]),
         *(_share(r.get(name)) for name in UPTAKE_VALUES), _share(r["followed"]),
         _share(r["propagation"]), _num(r["propagation_n"])]
        for r in data["uptake"]
    ]
    causes = [
        [Text(r["model"]), Text(r["cause"]), _num(r["count"]),
         _share(r["share_of_comparisons"]), _num(r["harmed"]), _num(r["labelled"]),
         _num(r["excluded"])]
        for r in data["causes"] if r["count"]
    ]
    lift = [
        [Text(c["model"]), Text(c["family"]), _num(c["n"]), _num(c["rated"]),
         _share(c["followed_fully"]), _delta(c["delta_gm"])]
        for c in data["uptake_lift"]["cells"]
    ]
    agreement = [
        [Text(a["task"]), Text(a["category"]), Text(a["annotator_a"]), Text(a["annotator_b"]),
         _num(a["n"]), _num(a["agree"]), _fixed(a["kappa"], ".3f")]
        for a in data["agreement"]
    ]
    usage = [
        [Text(u["task"]), Text(u["annotator"]), Text(u["annotator_kind"]), _num(u["labels"]),
         _num(u["tokens_in"] or 0), _num(u["tokens_out"] or 0),
         Text(f"${u['cost_usd'] or 0:.4f}", justify="right")]
        for u in data["usage"]
    ]
    return {"prevalence": prevalence, "uptake": uptake, "causes": causes, "lift": lift,
            "agreement": agreement, "usage": usage}


def summary_text(data: dict[str, Any]) -> Text:
    """One line: rubric, experiment, label count, uptake–lift correlation, failures."""
    total = sum(u["labels"] for u in data["usage"])
    rubric = data["rubric"]
    text = Text(f"rubric {rubric['name']} ({rubric['hash']}) · "
                f"experiment {data['experiment'] or 'all'}")
    if data["preview"]:
        text.append(" · ")
        text.append("PREVIEW (CPU grading)", style="bold reverse yellow")
    if not total:
        text.append(" · no labels yet: add human labels in the transfer inspector (key l), "
                    "or run the annotator", style="dim")
        return text
    lift = data["uptake_lift"]
    rho = "-" if lift["spearman"] is None else f"{lift['spearman']:+.3f}"
    text.append(f" · {total} label{'s' if total != 1 else ''} · uptake vs ΔGM: Spearman {rho} over "
                f"{lift['n_cells']} cells")
    if data["failures"]:
        text.append(f" · {data['failures']} failed annotation calls", style="red")
    return text


class RubricScreen(LiveScreen):
    """The rubric views of the current experiment, recomputed when labels change."""

    MODE = "rubric"
    HELP = ("Labels resolve per item: a human label (transfer inspector, key l) wins over "
            "LLM labels. One key opens each tab.")
    BINDINGS: ClassVar[list[BindingType]] = [
        *(Binding(key, f"tab('rubric-{tab}')", TABS[tab][0], show=False,  # in tab titles
                  id=f"rubric.tab_{tab}") for tab, key in TAB_KEYS.items()),
        Binding("r", "refresh", "Refresh", id="rubric.refresh"),
    ]
    DEFAULT_CSS = """
    RubricScreen #rubric-summary { height: auto; padding: 0 1; background: $panel; }
    RubricScreen DataTable { height: 1fr; }
    RubricScreen TabbedContent { height: 1fr; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.report: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield AppBar()
        yield Static(id="rubric-summary", markup=False)
        with TabbedContent(initial="rubric-prevalence", id="rubric-tabs"):
            for key, (title, _) in TABS.items():
                with TabPane(f"{title} ({TAB_KEYS[key]})", id=f"rubric-{key}"):
                    yield DataTable(id=f"rubric-{key}-table", cursor_type="row",
                                    zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        host(self).changes.subscribe(self, self.on_changes)
        self.query_one("#rubric-prevalence-table", DataTable).focus()  # keys page it at once
        self.load()

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        self.query_one(f"#{tab}-table", DataTable).focus()

    def main_scrollable(self) -> Widget | None:
        """The open tab's table."""
        return self.query_one(f"#{self.query_one(TabbedContent).active}-table", DataTable)

    @work(exclusive=True, group="rubric-load", exit_on_error=False)
    async def load(self) -> None:
        app = host(self)
        self.report = await app.read(rubric_report, app.experiment_id)
        self.show()

    def show(self) -> None:
        if self.report is None:
            return
        width = available_width(self.query_one("#rubric-prevalence-table", DataTable), 0)
        for key, rows in table_rows(self.report).items():
            names = TABS[key][1]
            columns = [Column(n, n, short=SHORT.get(n, ""), min_width=FLEXIBLE.get(n, 0))
                       for n in names]
            table = self.query_one(f"#rubric-{key}-table", DataTable)
            fill(table, fit(columns, rows, width - 2), names, rows)  # - 2: a scrollbar
        self.query_one("#rubric-summary", Static).update(summary_text(self.report))

    def on_resize(self, event: events.Resize) -> None:
        if self.report is not None:
            self.call_after_refresh(self.show)

    def on_changes(self, changes: Changes) -> None:
        if changes.labels or changes.comparisons or changes.experiments:
            self.reload_or_defer()

    def action_refresh(self) -> None:
        self.load()
