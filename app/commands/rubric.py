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
    from app.cli import UsageError
    from engine.rubric.model import RubricError, load_rubric

    try:
        return load_rubric(path)
    except RubricError as exc:
        raise UsageError(str(exc)) from exc


def open_store_db(path: str | None, *, readonly: bool) -> Any:
    from app.cli import UsageError
    from storage.db import StorageError, open_db

    try:
        return open_db(path, readonly=readonly)
    except StorageError as exc:
        raise UsageError(str(exc)) from exc


def pick_experiment(db: Any, experiment_id: str | None) -> str:
    """The given experiment (checked), or the newest one."""
    from app.cli import UsageError
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
    report.add_argument("--experiment", help="experiment id (default: all labels)")
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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:5.1f}%"


def _num(value: float | None, fmt: str = "+.3f") -> str:
    return "-" if value is None else format(value, fmt)


def render_report(data: dict[str, Any]) -> str:
    lines = [f"rubric {data['rubric']['name']} ({data['rubric']['hash']})"
             + ("   PREVIEW (CPU-graded experiment)" if data["preview"] else "")]
    lines += ["", "labels by task and annotator"]
    for u in data["usage"]:
        lines.append(f"  {u['task']:<7} {u['annotator']:<32} {u['annotator_kind']:<5} "
                     f"{u['labels']:>6}  tokens {u['tokens_in']}/{u['tokens_out']}  "
                     f"${u['cost_usd']:.4f}")
    if data["failures"]:
        lines.append(f"  {data['failures']} failed annotation calls (annotation_failed events)")
    lines += ["", "skill-category prevalence: helped vs harmed (points harmed - helped)"]
    for r in data["prevalence"]:
        lines.append(f"  {r['model']:<20} {r['category']:<26} helped {_pct(r['helped_share'])} "
                     f"(n={r['helped_n']})  harmed {_pct(r['harmed_share'])} "
                     f"(n={r['harmed_n']})  {_num(r['harmed_minus_helped_pts'], '+.1f')}")
    lines += ["", "uptake by transfer outcome"]
    for r in data["uptake"]:
        lines.append(f"  {r['model']:<20} {r['outcome']:<8} n={r['n']:<4} fully "
                     f"{_pct(r.get('followed fully'))}  followed {_pct(r['followed'])}  "
                     f"propagation {_pct(r['propagation'])} (n={r['propagation_n']})")
    lines += ["", "primary failure causes (share of the model's comparisons)"]
    for r in data["causes"]:
        if r["count"]:
            lines.append(f"  {r['model']:<20} {r['cause']:<32} {r['count']:>4}  "
                         f"{_pct(r['share_of_comparisons'])}")
    ul = data["uptake_lift"]
    lines += ["", f"uptake vs lift over model x family cells: Spearman "
              f"{_num(ul['spearman'])} over {ul['n_cells']} cells"]
    for c in ul["cells"]:
        lines.append(f"  {c['model']:<20} {c['family']:<18} n={c['n']:<4} fully "
                     f"{_pct(c['followed_fully'])}  dGM {_num(c['delta_gm'])}")
    lines += ["", "agreement (Cohen's kappa)"]
    for a in data["agreement"]:
        lines.append(f"  {a['task']:<7} {a['category']:<26} {a['annotator_a']} vs "
                     f"{a['annotator_b']}: n={a['n']} agree={a['agree']} "
                     f"kappa={_num(a['kappa'], '.3f')}")
    return "\n".join(lines)


def run_report(args: argparse.Namespace) -> int:
    from engine.rubric.views import report
    from storage.sanitize import clean

    rubric = load_rubric_arg(args.rubric)
    db = open_store_db(args.db, readonly=True)
    try:
        experiment = pick_experiment(db, args.experiment) if args.experiment else None
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
