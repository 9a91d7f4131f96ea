"""Two stored experiments compared: the one comparison behind ``mkb analyze --compare A B``
(rendered as text here) and the TUI's Compare view (rendered as tables by
``screens/compare.py``).

It holds where each side came from and was graded (``engine.analysis.sides``), the verdict
agreement over the implementations both graded with every changed verdict and its reason
codes, per problem the log ratio of the two speedups and their rank correlation
(``engine.bundle.agreement``, as a re-grade's report), and the paper's tables side by side
(``engine.analysis.compare``). Implementations pair by plan row, purpose, try and number: a
final evaluation with the other side's, a feedback submission only with a grading of the same
file (an experiment and its re-grade of an ``--all`` bundle).
"""

from __future__ import annotations

import json
from typing import Any

from engine.analysis.compare import render_side_by_side, side_by_side
from engine.analysis.sides import describe
from engine.analysis.text import share
from engine.bundle.agreement import Pair, agreement

Key = tuple[str, str, int, int]
_SQL = (
    "SELECT a.plan_key, a.model, a.problem_id, a.dsl, a.arm, a.replicate, s.purpose, s.try, "
    "s.n, s.source_hash, s.verdict, s.reason, s.speedup, s.feedback_json FROM submissions s "
    "JOIN attempts a ON a.id = s.attempt_id WHERE a.experiment_id = ? AND s.state = 'done' "
    "ORDER BY s.id"
)
_LABEL = ("model", "problem", "dsl", "arm", "replicate", "purpose", "try", "n")


def _graded(db: Any, experiment_id: str) -> dict[Key, dict[str, Any]]:
    """Every graded implementation of one experiment by (plan key, purpose, try, n)."""
    out: dict[Key, dict[str, Any]] = {}
    for key, *label, digest, verdict, reason, speedup, text in db.execute(
        _SQL, [experiment_id]
    ).fetchall():
        try:
            feedback = json.loads(text or "{}")
        except json.JSONDecodeError:
            feedback = {}
        if not isinstance(feedback, dict):
            feedback = {}
        for name, value in (("verdict", verdict), ("reason", reason), ("speedup", speedup)):
            feedback.setdefault(name, value)
        row = dict(zip(_LABEL, label, strict=True))
        out[(str(key), row["purpose"], int(row["try"]), int(row["n"]))] = {
            "label": row,
            "source_hash": digest,
            "feedback": feedback,
        }
    return out


def implementation_pairs(db: Any, a: str, b: str) -> tuple[list[Pair], dict[str, int]]:
    """A's graded implementations each with B's (None: B has not graded it), and counts:
    pairs of the same file, B's finals with no counterpart in A."""
    theirs = _graded(db, b)
    pairs: list[Pair] = []
    matched: set[Key] = set()
    same = 0
    for key, mine in _graded(db, a).items():
        other = theirs.get(key)
        same_file = other is not None and other["source_hash"] == mine["source_hash"]
        if key[1] != "final" and not same_file:
            continue  # feedback submissions compare only as gradings of one file
        if other is None:
            pairs.append(Pair(mine["label"], mine["feedback"], None, "not graded in B"))
            continue
        matched.add(key)
        same += same_file
        label = {**mine["label"], "same_source": same_file}
        pairs.append(Pair(label, mine["feedback"], other["feedback"]))
    only_b = sum(1 for k in theirs if k[1] == "final" and k not in matched)
    return pairs, {"same_source": same, "only_in_b": only_b}


def _devices_note(sa: dict[str, Any], sb: dict[str, Any]) -> str:
    """Why the two sides' speedups cannot be compared ("" when they were graded alike)."""
    if sa["preview"] != sb["preview"]:
        which = "A" if sa["preview"] else "B"
        return (
            f"{which} was graded in CPU preview (PREVIEW), the other on a GPU: its figures "
            "are not comparable with the other side's"
        )
    if sa["devices"] != sb["devices"]:
        da = ", ".join(sa["devices"]) or "unknown"
        db_ = ", ".join(sb["devices"]) or "unknown"
        return f"graded on different devices (A: {da}; B: {db_}): speedups are not comparable"
    return ""


def compare_experiments(
    db: Any, a: str, b: str, options: Any = None, time: str = "e2e"
) -> dict[str, Any]:
    """Everything that sets stored experiments ``a`` and ``b`` side by side, JSON-ready;
    ``options`` an ``AnalysisOptions`` (default: the analysis defaults), ``time`` the tables'
    runtime source. Raises ``OutcomeError`` when either experiment is not in the store."""
    from engine.analysis.outcomes import from_store
    from engine.analysis.report import AnalysisOptions, analyze

    opts = options or AnalysisOptions()
    report = side_by_side(
        analyze(from_store(db, a, time=time), opts), analyze(from_store(db, b, time=time), opts)
    )
    for side, experiment_id in (("a", a), ("b", b)):
        info = describe(db, experiment_id) or {}
        report[side].update(
            {
                "from": info.get("from", ""),
                "origin": info.get("origin", ""),
                "devices": info.get("devices", []),
                "regrade_of": info.get("regrade_of"),
            }
        )
    pairs, counts = implementation_pairs(db, a, b)
    found = agreement(
        pairs,
        original_preview=report["a"]["preview"],
        regrade_preview=report["b"]["preview"],
        original_devices=report["a"]["devices"],
        regrade_device=" + ".join(report["b"]["devices"]) or "unknown",
    )
    found["verdicts"].update(counts)
    return {**report, **found, "devices_note": _devices_note(report["a"], report["b"])}


def verdict_lines(report: dict[str, Any]) -> list[str]:
    v = report["verdicts"]
    lines = [
        f"Verdicts: {v['agree']} of {v['compared']} agree ({share(v['agreement'])}); "
        f"{len(v['not_regraded'])} not graded in B, {v['only_in_b']} finals only in B; "
        f"the same file in {v['same_source']} of {v['compared']} pairs"
    ]
    for c in v["changed"]:
        lines.append(
            f"  changed: {c['model']} {c['problem']} {c['dsl']} {c['arm']} r{c['replicate']} "
            f"{c['purpose']} {c['n']}: A {c['original']['verdict']} "
            f"({c['original']['reason'] or '-'}) -> B {c['regraded']['verdict']} "
            f"({c['regraded']['reason'] or '-'})"
        )
    for c in v["not_regraded"]:
        lines.append(
            f"  not graded in B: {c['model']} {c['problem']} {c['dsl']} {c['arm']} "
            f"r{c['replicate']} {c['purpose']} {c['n']}"
        )
    return lines


def speedup_lines(report: dict[str, Any], ratio: str = "B/A") -> list[str]:
    """The speedup agreement of two sides; ``ratio`` names the log ratio's sides."""
    s = report["speedups"]
    rho = "-" if s["spearman"] is None else f"{s['spearman']:+.3f}"
    lines = [f"Speedups (both passing: {s['n']}): Spearman rank correlation {rho}"]
    if not report["speedups_comparable"]:
        lines.append(f"  NOTE: {report['speedups_note']}")
    for p in s["per_problem"]:
        lines.append(
            f"  {p['problem']}: n {p['n']}  mean log({ratio}) {p['mean_log_ratio']:+.3f}  "
            f"ratio {p['ratio']:.3f}x"
        )
    return lines


def render_comparison(report: dict[str, Any]) -> str:
    """The comparison as plain text (``mkb analyze --compare A B``)."""
    note = [f"NOTE: {report['devices_note']}"] if report["devices_note"] else []
    middle = [*note, "", *verdict_lines(report), "", *speedup_lines(report), ""]
    return render_side_by_side(report, after_head=middle)
