"""`mkb rubric`: show or check a rubric file, report rubric views, list disagreements."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.commands.db import add_db_argument


def add_rubric_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rubric", metavar="FILE",
                        help="rubric TOML (default: the packaged default rubric)")


def load_rubric_arg(path: str | None) -> Any:
    from app.errors import UsageError
    from engine.rubric.model import RubricError, load_rubric

    try:
        return load_rubric(path)
    except RubricError as exc:
        raise UsageError(str(exc)) from exc


def open_store_db(path: str | None, *, readonly: bool) -> Any:
    from app.errors import UsageError
    from storage.db import StorageError, open_db

    try:
        return open_db(path, readonly=readonly)
    except StorageError as exc:
        raise UsageError(str(exc)) from exc


def pick_experiment(db: Any, experiment_id: str | None) -> str:
    """The given experiment (checked), or the newest one."""
    from app.errors import UsageError
    from storage import queries

    if experiment_id:
        if queries.experiment(db, experiment_id) is None:
            raise UsageError(f"no experiment {experiment_id!r} in the database")
        return experiment_id
    experiments = queries.experiments(db)
    if not experiments:
        raise UsageError("the database holds no experiment")
    return experiments[0].id


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("rubric", help="rubric file, rubric views and agreement")
    sub = parser.add_subparsers(dest="rubric_command", metavar="ACTION", required=True)

    report = sub.add_parser("report", help="prevalence, uptake, causes, uptake-lift, kappa")
    add_db_argument(report)
    scope = report.add_mutually_exclusive_group()
    scope.add_argument("--experiment", help="experiment id (default: newest)")
    scope.add_argument(
        "--all-experiments",
        action="store_true",
        help="pool the labels and comparisons of every experiment",
    )
    report.add_argument("--annotator", help="use only this annotator's labels")
    report.add_argument("--json", action="store_true", help="print JSON")
    add_rubric_argument(report)
    report.set_defaults(func=run_report)

    show = sub.add_parser("show", help="print the rubric (default or --rubric FILE)")
    add_rubric_argument(show)
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=run_show)

    check = sub.add_parser("check", help="validate a rubric file")
    check.add_argument("file")
    check.set_defaults(func=run_check)

    dis = sub.add_parser("disagreements", help="items on which annotators disagree")
    add_db_argument(dis)
    dis.add_argument("--task", choices=("skill", "uptake", "cause"))
    dis.add_argument("--category")
    dis.add_argument("--experiment")
    dis.add_argument("--json", action="store_true", help="print JSON")
    dis.set_defaults(func=run_disagreements)


def _header(data: dict[str, Any]) -> list[str]:
    from engine.analysis.text import PREVIEW_TAG

    exp = data["experiment"]
    scope = (
        f"experiment {data.get('experiment_name') or '-'} (id {exp})" if exp else "all experiments"
    )
    return [
        f"rubric {data['rubric']['name']} ({data['rubric']['hash']}) · {scope}"
        + (f"   {PREVIEW_TAG}" if data["preview"] else "")
    ]


def _usage(data: dict[str, Any]) -> list[str]:
    from engine.analysis.text import text_table

    rows = [
        (
            u["task"],
            u["annotator"],
            u["annotator_kind"],
            u["labels"],
            u["tokens_in"] or 0,
            u["tokens_out"] or 0,
            f"${u['cost_usd'] or 0:.4f}",
        )
        for u in data["usage"]
    ]
    lines = text_table(
        "labels by task and annotator",
        ("task", "annotator", "kind", "labels", "tokens in", "tokens out", "cost"),
        rows,
        left=3,
    )
    if data["failures"]:
        lines.append(f"  {data['failures']} failed annotation calls (annotation_failed events)")
    return lines


def _prevalence(data: dict[str, Any]) -> list[str]:
    from engine.analysis.text import share, text_table, title

    rows = [
        (
            r["model"],
            r["category"],
            share(r["helped_share"]),
            r["helped_n"],
            share(r["harmed_share"]),
            r["harmed_n"],
            _points(r["harmed_minus_helped_pts"]),
        )
        for r in data["prevalence"]
        if r["helped_n"] or r["harmed_n"]
    ]
    return text_table(
        title("skill-category prevalence: helped vs harmed", data["preview"]),
        ("model", "category", "helped", "n helped", "harmed", "n harmed", "harmed - helped"),
        rows,
        left=2,
    )


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} pts"


def _uptake(data: dict[str, Any]) -> list[str]:
    from engine.analysis.text import share, text_table, title

    ratings = data["rubric"].get("uptake_ratings") or []
    rows = [
        (
            r["model"],
            r["outcome"],
            r["n"],
            *(share(r.get(k)) for k in ratings),
            share(r["followed"]),
            share(r["propagation"]),
            r["propagation_n"],
        )
        for r in data["uptake"]
    ]
    return text_table(
        title("uptake by transfer outcome", data["preview"]),
        ("model", "outcome", "n", *ratings, "followed", "propagation", "n prop."),
        rows,
        left=2,
    )


def _causes(data: dict[str, Any]) -> list[str]:
    from engine.analysis.text import share, text_table, title

    rows = [
        (
            r["model"],
            r["cause"],
            r["count"],
            share(r["share_of_comparisons"]),
            r["harmed"],
            r["labelled"],
            r["excluded"],
        )
        for r in data["causes"]
        if r["count"]
    ]
    return text_table(
        title("primary failure causes (share of the model's comparisons)", data["preview"]),
        ("model", "cause", "count", "share", "harmed", "labelled", "no failure"),
        rows,
        left=2,
    )


def _uptake_lift(data: dict[str, Any]) -> list[str]:
    from engine.analysis.text import share, signed, text_table, title
    from engine.rubric.views import uptake_lift_summary

    lift = data["uptake_lift"]
    rows = [
        (
            c["model"],
            c["family"],
            c["n"],
            c["rated"],
            share(c["followed_fully"]),
            signed(c["delta_gm"]),
        )
        for c in lift["cells"]
    ]
    return text_table(
        title(uptake_lift_summary(lift), data["preview"]),
        ("model", "family", "N", "rated", "followed fully", "dGM"),
        rows,
        left=2,
    )


def _agreement(data: dict[str, Any]) -> list[str]:
    from engine.analysis.text import fixed, text_table

    rows = [
        (
            a["task"],
            a["category"],
            a["annotator_a"],
            a["annotator_b"],
            a["n"],
            a["agree"],
            fixed(a["kappa"], ".3f"),
        )
        for a in data["agreement"]
    ]
    return text_table(
        "agreement (Cohen's kappa)",
        ("task", "category", "annotator A", "annotator B", "n", "agree", "kappa"),
        rows,
        left=4,
    )


def render_report(data: dict[str, Any]) -> str:
    """Every rubric view as plain text (the Rubric screen's tables)."""
    lines = _header(data)
    for section in (_usage, _prevalence, _uptake, _causes, _uptake_lift, _agreement):
        lines += section(data)
    return "\n".join(lines)


def run_report(args: argparse.Namespace) -> int:
    from engine.rubric.views import report
    from storage.sanitize import clean

    rubric = load_rubric_arg(args.rubric)
    db = open_store_db(args.db, readonly=True)
    try:
        experiment = None if args.all_experiments else pick_experiment(db, args.experiment)
        data = report(db, experiment_id=experiment, annotator=args.annotator, rubric=rubric)
    finally:
        db.conn.close()
    data = clean(data)  # annotator-written names and values, safe to print
    print(json.dumps(data, indent=2) if args.json else render_report(data))
    return 0


def run_show(args: argparse.Namespace) -> int:
    rubric = load_rubric_arg(args.rubric)
    if args.json:
        print(json.dumps({**rubric.to_dict(), "hash": rubric.hash}, indent=2))
        return 0
    print(f"{rubric.name} ({rubric.hash})\n\nskill categories (present / absent):")
    for t in rubric.categories:
        print(f"  {t.name}: {t.criterion}")
    print("\nuptake ratings:")
    for t in rubric.uptake:
        print(f"  {t.name}: {t.criterion}")
    print(f"\n{rubric.propagation.name} ({'/'.join(rubric.propagation_values)}): "
          f"{rubric.propagation.criterion}")
    print("\nfailure causes, in precedence order:")
    for i, t in enumerate(rubric.causes, 1):
        shown = rubric.report_cause(t.name)
        print(f"  {i}. {t.name}{f' [reported as {shown}]' if shown != t.name else ''}: "
              f"{t.criterion}")
    print(f"  (excluded: {rubric.no_failure})")
    return 0


def run_check(args: argparse.Namespace) -> int:
    from engine.rubric.model import RubricError, load_rubric

    try:
        rubric = load_rubric(args.file)
    except RubricError as exc:
        print(f"invalid: {exc}")
        return 1
    print(f"ok: {rubric.name} ({rubric.hash}): {len(rubric.categories)} categories, "
          f"{len(rubric.uptake)} uptake ratings, {len(rubric.causes)} causes")
    return 0


def run_disagreements(args: argparse.Namespace) -> int:
    from engine.rubric.agreement import disagreements
    from storage.sanitize import clean

    db = open_store_db(args.db, readonly=True)
    try:
        experiment = pick_experiment(db, args.experiment) if args.experiment else None
        rows = clean(disagreements(db, task=args.task, category=args.category,
                                   experiment_id=experiment))
    finally:
        db.conn.close()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        values = ", ".join(f"{k}={v}" for k, v in r["values"].items())
        print(f"{r['task']:<7} {r['subject_id']:>6} {r['category']:<26} {values}")
    print(f"{len(rows)} disagreements")
    return 0
