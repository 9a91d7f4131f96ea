"""Run the fidelity comparison over the catalog and render it (text, Markdown, CSV, JSON)."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from problems.fidelity import (
    FidelityOptions,
    FidelityRow,
    RunResult,
    compare_problem,
    error_row,
    missing_row,
    upstream_paths,
)
from problems.spec import Problem
from problems.upstream import UpstreamError, load_upstream, problems_dir


def _recipe_ids(upstream: Path) -> set[str]:
    folder = problems_dir(upstream) / "_sol_execbench"
    return {f"p{p.stem[:2]}" for p in folder.glob("*.json")} if folder.is_dir() else set()


def compare_catalog(
    problems: Sequence[Problem],
    upstream: Path,
    sol_dataset: Path | None = None,
    opts: FidelityOptions | None = None,
    progress: Callable[[FidelityRow], None] | None = None,
) -> list[FidelityRow]:
    """One row per problem, in id order; problems with no upstream file say why."""
    opts = opts or FidelityOptions()
    recipes = _recipe_ids(upstream)
    rows: list[FidelityRow] = []
    with tempfile.TemporaryDirectory(prefix="mkb-sol-") as work:
        found, recipe_errors = upstream_paths(upstream, sol_dataset, Path(work))
        for problem in sorted(problems, key=lambda p: p.number):
            row = _row(problem, found, recipe_errors, recipes, sol_dataset, opts)
            rows.append(row)
            if progress:
                progress(row)
    return rows


def _row(
    problem: Problem,
    found: dict[str, tuple[str, Path]],
    recipe_errors: dict[str, str],
    recipes: set[str],
    sol_dataset: Path | None,
    opts: FidelityOptions,
) -> FidelityRow:
    if problem.id in recipe_errors:
        return error_row(problem, "sol-execbench", recipe_errors[problem.id])
    if problem.id not in found:
        if problem.id in recipes and sol_dataset is None:
            return missing_row(problem, "SOL-ExecBench recipe only: give --sol-execbench PATH")
        return missing_row(problem, "no upstream file or recipe")
    source, path = found[problem.id]
    try:
        module = load_upstream(path)
    except UpstreamError as exc:
        return error_row(problem, source, str(exc))
    return compare_problem(problem, module, source, opts)


def _run_cell(run: RunResult | None) -> str:
    if run is None:
        return ""
    text = run.verdict
    if run.max_error is not None and run.allowance is not None:
        text += f" ({run.max_error:.3g} vs {run.allowance:.3g})"
    if run.generator == "ours" and run.scale:
        text += f" [{run.scale}]"
    return text


def _runs(row: FidelityRow) -> tuple[RunResult | None, RunResult | None]:
    by = {r.generator: r for r in row.runs}
    return by.get("ours"), by.get("upstream")


def _details(row: FidelityRow) -> str:
    parts = [row.interface] if row.interface else []
    parts += [f"{r.generator}: {r.detail}" for r in row.runs if r.detail]
    return "; ".join(parts)


HEADER = ("id", "slug", "verdict", "our generator", "upstream generator", "details")


def table_rows(rows: Sequence[FidelityRow]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for row in rows:
        ours, theirs = _runs(row)
        out.append(
            (row.id, row.slug, row.verdict, _run_cell(ours), _run_cell(theirs), _details(row))
        )
    return out


def summary(rows: Sequence[FidelityRow]) -> str:
    counts = Counter(r.verdict for r in rows)
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def format_text(rows: Sequence[FidelityRow]) -> str:
    lines = []
    for cells in table_rows(rows):
        pid, slug, verdict, ours, theirs, details = cells
        lines.append(
            f"{pid:<4} {verdict:<18} {slug[:48]:<48} ours: {ours or '-'} | "
            f"upstream: {theirs or '-'}"
        )
        if details:
            lines.append(f"       {details[:400]}")
    lines.append(f"{len(rows)} problems: {summary(rows)}")
    return "\n".join(lines)


def format_markdown(rows: Sequence[FidelityRow]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(cell(c) for c in cells) + " |" for cells in table_rows(rows)]
    return "\n".join(lines)


def format_csv(rows: Sequence[FidelityRow]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(HEADER)
    writer.writerows(table_rows(rows))
    return buffer.getvalue()


def format_json(rows: Sequence[FidelityRow]) -> str:
    return json.dumps([r.as_dict() for r in rows], indent=2)
