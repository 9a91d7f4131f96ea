"""Pure render helpers: rows and records in, ``rich.text.Text`` out (never markup).

Agent-produced strings (analysis, keystrokes, terminal output, skills, error messages) go
into ``Text`` objects verbatim, so ``[/]`` or ``[bold]`` in them is shown, not parsed.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from rich.console import Group
from rich.text import Text

from problems.sol import share_of_sol
from storage.queries import AttemptRow, ComparisonRow, StepRow, SubmissionRow

ATTEMPT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "id"),
    ("model", "model"),
    ("problem_id", "problem"),
    ("dsl", "DSL"),
    ("arm", "arm"),
    ("state", "state"),
    ("elapsed", "elapsed / budget"),
    ("submissions_used", "subs"),
    ("speedup", "final"),  # the final evaluation's speedup: what the paper scores
    ("best_speedup", "best"),
)
SORTABLE = {"id", "model", "problem_id", "dsl", "arm", "state", "submissions_used",
            "speedup", "best_speedup", "started_at"}
STATE_STYLES = {
    "running": "bold cyan",
    "final_eval": "cyan",
    "queued": "yellow",
    "finished": "green",
    "failed": "red",
    "interrupted": "magenta",
    "skipped": "dim",
    "planned": "dim",
    "stopped": "bold magenta",  # an operator stopped it (attempts.stop_reason)
}
# ungraded: the grader failed (infra.*, an invalid timing), not the agent: its own colour
UNGRADED_STYLE = "dark_orange"
VERDICT_STYLES = {"help": "green", "harm": "red", "neutral": "yellow",
                  "pass": "green", "preview": "cyan", "fail": "red", "error": "magenta",
                  "ungraded": UNGRADED_STYLE}


def parse_time(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        return None


def clock(seconds: float) -> str:
    """``m:ss`` (or ``h:mm:ss``) for a duration."""
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def elapsed_seconds(row: AttemptRow, now: datetime) -> float | None:
    start = parse_time(row.started_at)
    if start is None:
        return None
    end = parse_time(row.ended_at) or now
    return (end - start).total_seconds()


def elapsed_text(row: AttemptRow, now: datetime, compact: bool = False) -> str:
    seconds = elapsed_seconds(row, now)
    used = "-" if seconds is None else clock(seconds)
    return f"{used}{'/' if compact else ' / '}{clock(row.budget_s)}"


def speedup_text(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}x"


def ms_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} ms"


def state_text(state: str, outcome: str | None = None, compact: bool = False) -> Text:
    """``finished:pass`` (compact: ``done:pass``), else the state."""
    done = "done" if compact else state
    label = state if not outcome or state != "finished" else f"{done}:{outcome}"
    if outcome == "ungraded":
        return Text(label, style=UNGRADED_STYLE)
    return Text(label, style=STATE_STYLES.get(state, ""))


def arm_label(row: AttemptRow, compact: bool = False) -> str:
    """The arm, with the plan variant when there is one (``cute2tirx_skill edited:1a2b``),
    so an edited-skill or cross-model treatment never passes for the paper's arm; compact:
    a treatment as its direction (``cute→tirx``)."""
    arm, variant = row.arm, row.variant
    if compact:
        if arm.endswith("_skill"):
            arm = arm.removesuffix("_skill").replace("2", "→", 1)
        if variant.startswith("edited:"):
            variant = "ed:" + variant.removeprefix("edited:")[:4]
    return f"{arm} {variant}" if variant else arm


def attempt_cells(row: AttemptRow, now: datetime, compact: bool = False) -> tuple[Text, ...]:
    """The Attempts table's cells for one row, in ``ATTEMPT_COLUMNS`` order; ``compact``
    abbreviates (model without its provider, arm as a direction, ``done:``) for narrow
    terminals."""
    model = row.model.rsplit("/", 1)[-1] if compact else row.model
    return (
        Text(str(row.id), justify="right"),
        Text(model),
        Text(row.problem_id),
        Text(row.dsl),
        Text(arm_label(row, compact)),
        state_text("stopped" if row.stop_reason else row.state, row.outcome, compact),
        Text(elapsed_text(row, now, compact), justify="right"),
        Text(str(row.submissions_used), justify="right"),
        Text(speedup_text(row.speedup), justify="right"),
        Text(speedup_text(row.best_speedup), justify="right"),
    )


# -- trajectory --------------------------------------------------------------------------------
def step_renderable(step: StepRow) -> Group:
    """One trajectory turn: analysis, plan, keystrokes and terminal output, all plain."""
    parts: list[Text] = [
        Text(f"── turn {step.step_index} · try {step.try_number} · {step.source} ──",
             style="bold"),
    ]
    for title, body, style in (
        ("analysis", step.analysis, ""),
        ("plan", step.plan, ""),
        ("keystrokes", step.keystrokes, "yellow"),
        ("terminal", step.terminal_output, "dim"),
        ("message", step.message, ""),
    ):
        if body:
            section = Text(f"{title}: ", style="bold " + (style or "default"))
            section.append(Text(body.rstrip("\n"), style=style))
            parts.append(section)
    return Group(*parts)


# -- submissions -------------------------------------------------------------------------------
def _sci(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3g}"


def draw_lines(draws: Sequence[dict[str, Any]]) -> list[Text]:
    """Correctness per draw and output: error vs allowance."""
    lines: list[Text] = []
    for draw in draws:
        ok = bool(draw.get("passed"))
        head = Text(f"    {draw.get('kind', 'draw')} {draw.get('index', '?')}: ",
                    style="green" if ok else "red")
        head.append("ok" if ok else "FAIL")
        if draw.get("structure"):
            head.append(Text(f"  structure: {draw['structure']}"))
        lines.append(head)
        for out in draw.get("outputs") or []:
            line = Text(f"      {out.get('name', out.get('index', '?'))}: ",
                        style="" if out.get("passed") else "red")
            if out.get("kind") == "float":
                relation = "≤" if out.get("passed") else ">"
                line.append(f"error {_sci(out.get('max_error'))} {relation} allowance "
                            f"{_sci(out.get('allowance'))}"
                            f" (reference error {_sci(out.get('reference_error'))})")
            else:
                line.append(str(out.get("kind", "")))
            if out.get("detail"):
                line.append(Text(f"  {out['detail']}"))
            lines.append(line)
    return lines


def _us(value: Any) -> str:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return f"{float(value) * 1e3:.1f}" if ok else "-"


def breakdown_text(fb: dict[str, Any]) -> Text | None:
    """Host / device / end-to-end time per call for the submission and eager (the runners'
    own figures under ``clock.breakdown``: informational, never scored)."""
    clock = fb.get("clock")
    split = clock.get("breakdown") if isinstance(clock, dict) else None
    if not isinstance(split, dict):
        return None
    keys = ("host_ms", "device_ms", "e2e_ms")
    parts = [f"{side} " + " / ".join(_us(figures.get(k)) for k in keys)
             for side in ("submission", "eager")
             if isinstance(figures := split.get(side), dict)]
    if not parts:
        return None
    text = Text("  host / device / e2e µs: " + " · ".join(parts))
    text.append("  (runner's figures, not scored)", style="dim")
    if isinstance(clock, dict) and isinstance(clock.get("warm_calls"), dict):  # warm_calls
        text.append("  each timed call after an untimed warm call", style="dim")
    return text


def submission_renderable(sub: SubmissionRow) -> Group:
    """A submission's feedback: import, correctness, timing, speedup and reason codes."""
    fb = sub.feedback or {}
    title = Text(f"#{sub.n} {sub.purpose} (try {sub.try_number})  ", style="bold")
    verdict = sub.verdict or sub.state
    title.append(verdict, style=VERDICT_STYLES.get(verdict, ""))
    if sub.speedup is not None:
        title.append(f"  speedup {speedup_text(sub.speedup)}")
    title.append(f"  impl {ms_text(sub.impl_median_ms)}  eager {ms_text(sub.eager_median_ms)}")
    lines: list[Text] = [title]
    if sub.reason:
        lines.append(Text(f"  reason: {sub.reason}", style="red"))
    if fb.get("message"):
        lines.append(Text(f"  message: {fb['message']}"))
    import_ok = fb.get("import_ok")
    if import_ok is not None:
        imp = Text("  import: ")
        imp.append("ok" if import_ok else "failed", style="green" if import_ok else "red")
        if fb.get("import_error"):
            imp.append(Text(f"  {fb['import_error']}"))
        lines.append(imp)
    for finding in fb.get("findings") or []:
        where = f" (line {finding.get('line')})" if finding.get("line") else ""
        lines.append(Text(f"  rule {finding.get('code')}: {finding.get('message')}{where}",
                          style="red"))
    draws = fb.get("draws") or []
    if draws:
        lines.append(Text("  correctness:"))
        lines.extend(draw_lines(draws))
    extras = []
    if fb.get("dsl_launches_per_call") is not None:
        extras.append(f"DSL launches/call {fb['dsl_launches_per_call']:g}")
    if fb.get("bypass"):
        extras.append(f"bypass {fb['bypass']}")
    if fb.get("kernel_audit"):
        extras.append(f"kernel audit {fb['kernel_audit'].get('status')}")
    sol_share = share_of_sol(fb.get("sol_ms"), fb.get("impl_median_ms"))
    if sol_share is not None:
        extras.append(f"{sol_share:.1f}% of SOL")
    if fb.get("device"):
        extras.append(f"device {fb['device']}")
    if extras:
        lines.append(Text("  " + " · ".join(extras)))
    split = breakdown_text(fb)
    if split is not None:
        lines.append(split)
    for flag in fb.get("flags") or []:
        lines.append(Text(f"  flag {flag}", style="bold red"))
    timings = fb.get("timings_s") or {}
    if timings:
        lines.append(Text("  times: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())))
    return Group(*lines)


def outcome_text(row: AttemptRow) -> Text:
    text = Text()
    text.append("state ", style="bold")
    text.append_text(state_text(row.state))
    text.append(f"   outcome {row.outcome or '-'}", style=VERDICT_STYLES.get(row.outcome or "", ""))
    text.append(f"   final speedup {speedup_text(row.speedup)}"
                f"   impl {ms_text(row.impl_median_ms)}   eager {ms_text(row.eager_median_ms)}")
    text.append(f"\nbest speedup {speedup_text(row.best_speedup)}   submissions "
                f"{row.submissions_used}   tries {row.tries}   tokens "
                f"{row.tokens_in}/{row.tokens_out}   cost ${row.cost_usd:.2f}")
    if row.reason:
        style = UNGRADED_STYLE if row.outcome == "ungraded" else "red"
        text.append(Text(f"\nreason: {row.reason}", style=style))
    if row.error:
        text.append(Text(f"\nerror: {row.error}", style="red"))
    if row.stop_reason:
        text.append(Text(f"\nstopped by an operator: {row.stop_reason}", style="magenta"))
    return text


def interventions_text(commands: list[Any]) -> Text:
    """An attempt's notes and operators' actions, oldest first (``storage/controls.py``)."""
    text = Text("\n\nNotes and interventions", style="bold")
    if not commands:
        text.append("\nnone", style="dim")
    for c in commands:
        what = c.args.get("text") if c.action == "note" else c.reason
        text.append(f"\n{c.created_at[:19]} · {c.actor} · {c.action}", style="bold")
        text.append(f" {what}" if what else "")
        text.append(f" · {c.state}", style=COMMAND_STYLES.get(c.state, ""))
        text.append(f" ({c.outcome})" if c.outcome and c.action != "note" else "", style="dim")
    return text


COMMAND_STYLES = {"applied": "green", "refused": "yellow", "failed": "red",
                  "pending": "cyan", "applying": "cyan"}


def attempt_title(row: AttemptRow) -> Text:
    """The detail header: what the attempt is, and its final (scored) and best speedups."""
    text = Text(f"attempt {row.id} · {row.model} · {row.problem_id} ({row.family}) · "
                f"{row.dsl} · {arm_label(row)} · r{row.replicate} · ")
    text.append(f"final {speedup_text(row.speedup)}", style="bold")
    text.append(f" (best {speedup_text(row.best_speedup)})", style="dim")
    return text


# -- transfers ---------------------------------------------------------------------------------
def diff_texts(base: str, other: str) -> tuple[Text, Text]:
    """Side-by-side line diff: lines only in ``base`` red, only in ``other`` green."""
    a_lines, b_lines = base.splitlines(), other.splitlines()
    left, right = Text(), Text()
    matcher = difflib.SequenceMatcher(a=a_lines, b=b_lines, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        for line in a_lines[i1:i2]:
            left.append(line + "\n", style="" if op == "equal" else "red")
        for line in b_lines[j1:j2]:
            right.append(line + "\n", style="" if op == "equal" else "green")
    return left, right


def edit_diff_text(original: str, edited: str) -> Text:
    """An edited skill against the one it was edited from, whole: ``+`` lines the edit
    added (green), ``-`` lines it removed (red), unchanged lines indented."""
    a_lines, b_lines = original.splitlines(), edited.splitlines()
    out = Text()
    matcher = difflib.SequenceMatcher(a=a_lines, b=b_lines, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            for line in a_lines[i1:i2]:
                out.append(f"  {line}\n")
            continue
        for line in a_lines[i1:i2]:
            out.append(f"- {line}\n", style="red")
        for line in b_lines[j1:j2]:
            out.append(f"+ {line}\n", style="green")
    return out


def rho_text(comparison: ComparisonRow) -> Text:
    if not comparison.resolved:
        return Text("unresolved", style="dim")
    rho = "-" if comparison.rho is None else f"ρ = {comparison.rho:.3f}"
    text = Text(rho + "  ")
    verdict = comparison.verdict or "-"
    text.append(verdict, style=VERDICT_STYLES.get(verdict, ""))
    if comparison.skipped:
        text.append("  (treatment skipped: blank source skill)", style="dim")
    return text


def arm_summary(label: str, row: AttemptRow | None) -> Text:
    text = Text(f"{label}: ", style="bold")
    if row is None:
        return text + Text("-")
    text.append(f"#{row.id} {arm_label(row)} ")
    text.append_text(state_text(row.state))
    text.append(f" {row.outcome or '-'}", style=VERDICT_STYLES.get(row.outcome or "", ""))
    text.append(f"  {speedup_text(row.speedup)}  {ms_text(row.impl_median_ms)}")
    return text


def pct(value: Any) -> str:
    return "-" if value is None else f"{float(value) * 100:.1f}%"


def signed_pct(value: Any) -> str:
    return "-" if value is None else f"{float(value) * 100:+.1f}%"


def count_values(values: Iterable[str]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
