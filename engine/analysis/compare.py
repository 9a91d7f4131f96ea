"""Two analyses side by side (``mkb analyze --compare A B``, a re-grade's report): the
paper's tables of each, row by row — pass rates, GM and R(2) per model and DSL; paired lift
(ΔGM, help and harm rates) per model, direction and family; the rate ladder."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.analysis.text import PREVIEW_TAG, fixed, share, signed, speed, text_table

SOLO_FIELDS = ("n", "pass_rate", "gm", "r2")
LIFT_FIELDS = ("n", "delta_gm", "help_rate", "harm_rate")


def _pick(row: dict[str, Any] | None, names: Sequence[str]) -> dict[str, Any] | None:
    return None if row is None else {k: row.get(k) for k in names}


def _paired(
    a: list[dict[str, Any]], b: list[dict[str, Any]], key: Sequence[str], names: Sequence[str]
) -> list[dict[str, Any]]:
    def index(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {tuple(r.get(k) for k in key): r for r in rows}

    ia, ib = index(a), index(b)
    keys = list(dict.fromkeys([*ia, *ib]))
    return [
        {
            **dict(zip(key, k, strict=True)),
            "a": _pick(ia.get(k), names),
            "b": _pick(ib.get(k), names),
        }
        for k in keys
    ]


def _ladder(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _paired(a, b, ("subset",), ("n", "base", "skill", "difference"))


def side_by_side(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The paper's tables of two analysis reports (``engine.analysis.report.analyze``)."""

    def who(r: dict[str, Any]) -> dict[str, Any]:
        return {
            **(r.get("experiment") or {}),
            "preview": bool(r.get("preview")),
            "label": r.get("label"),
            "time": r.get("time"),
        }

    return {
        "a": who(a),
        "b": who(b),
        "solo": _paired(a.get("solo", []), b.get("solo", []), ("model", "dsl"), SOLO_FIELDS),
        "lift": _paired(
            a.get("lift", []), b.get("lift", []), ("model", "direction", "family"), LIFT_FIELDS
        ),
        "ladder": _ladder(a.get("ladder", []), b.get("ladder", [])),
        "coverage": {"a": a.get("coverage"), "b": b.get("coverage")},
    }


def _cells(
    row: dict[str, Any], names: Sequence[str], fmt: Mapping[str, Callable[[Any], str]]
) -> list[str]:
    out: list[str] = []
    for side in ("a", "b"):
        values = row[side]
        for name in names:
            out.append("·" if values is None else fmt.get(name, str)(values.get(name)))
    return out


def _who(tag: str, side: dict[str, Any]) -> str:
    """``A: id (name) — label``, then where it came from and was graded when known."""
    line = f"{tag}: {side.get('id')} ({side.get('name')}) — {side.get('label')}"
    if side.get("from"):
        devices = ", ".join(side.get("devices") or []) or "no stored grading"
        line += f"; {side['from']}; graded on {devices}"
    return line


def render_side_by_side(cmp: dict[str, Any], after_head: Sequence[str] = ()) -> str:
    """The comparison as plain text: each table with A's columns, then B's; ``after_head``
    lines go between the two sides' names and the tables."""
    preview = cmp["a"]["preview"] or cmp["b"]["preview"]
    tag = f"  {PREVIEW_TAG}" if preview else ""
    head = [_who("A", cmp["a"]), _who("B", cmp["b"]), *after_head, "(· : no such row on that side)"]
    for side in ("A", "B"):
        time = cmp[side.lower()].get("time")
        if time and time.get("source", "e2e") != "e2e":
            head.append(
                f"{side} runtimes: {time['label']}; {time['with_time']} of "
                f"{time['comparisons']} resolved comparisons kept"
            )
    solo_fmt = {"pass_rate": share, "gm": speed, "r2": share}
    lift_fmt = {"delta_gm": signed, "help_rate": share, "harm_rate": share}
    solo = [(r["model"], r["dsl"], *_cells(r, SOLO_FIELDS, solo_fmt)) for r in cmp["solo"]]
    lift = [
        (r["model"], r["direction"], r["family"], *_cells(r, LIFT_FIELDS, lift_fmt))
        for r in cmp["lift"]
    ]
    ladder: list[tuple[Any, ...]] = []
    for r in cmp["ladder"]:
        for part in ("base", "skill", "difference"):
            ladder.append(
                (
                    r["subset"],
                    part,
                    *(
                        "·"
                        if r[s] is None
                        else " ".join(
                            fixed(v, ".1f")
                            if k == "S"
                            else (signed if part == "difference" else share)(v)
                            for k, v in r[s][part].items()
                        )
                        for s in ("a", "b")
                    ),
                )
            )
    return "\n".join(
        [
            *head,
            *text_table(
                f"Solo: pass rate, GM speedup, R(2) — A | B{tag}",
                ("model", "dsl", *(f"{s}.{n}" for s in "AB" for n in SOLO_FIELDS)),
                solo,
                left=2,
            ),
            *text_table(
                f"Paired lift (ΔGM, help T, harm H) — A | B{tag}",
                ("model", "direction", "family", *(f"{s}.{n}" for s in "AB" for n in LIFT_FIELDS)),
                lift,
                left=3,
            ),
            *text_table(
                f"Rate ladder (R@0 R@0.5 R@1 R@2 R@4 S) — A | B{tag}",
                ("subset", "arm", "A", "B"),
                ladder,
                left=4,
            ),
        ]
    )
