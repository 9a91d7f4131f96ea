"""`mkb sandbox check`: can this host run the local sandbox, with what limits, and does its
agent jail hold (one line per verified property)?"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sandbox",
        help="check the local namespace sandbox on this host",
        description="Check whether this host can run the default (Linux namespace) sandbox.",
    )
    sub = parser.add_subparsers(dest="sandbox_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: (parser.print_help(), 0)[1])
    check = sub.add_parser(
        "check", help="report namespace, tmux, cgroup and DSL support; verify the agent jail"
    )
    check.add_argument("--json", action="store_true", help="print JSON")
    check.set_defaults(func=check_handler)
    prep = sub.add_parser("prepare", help="build a per-DSL Python venv for the sandbox")
    prep.add_argument("--dsl", choices=["cute", "tirx"], required=True)
    prep.add_argument(
        "--root",
        type=Path,
        default=None,
        help="where venvs live (default $MKB_SANDBOX_VENVS or mkb-data/sandbox-venvs)",
    )
    prep.add_argument("--dry-run", action="store_true", help="print the plan only")
    prep.set_defaults(func=prepare_handler)


def _report() -> dict[str, object]:
    from engine.sandbox.jail_check import run_checks
    from engine.sandbox.limits import CgroupLimits
    from engine.sandbox.local_ns import default_python_bin, namespace_support_problem
    from engine.tasks.docs import package_version
    from engine.tasks.dsls import DSLS

    problem = namespace_support_problem()
    limits = CgroupLimits(name="probe", cpus=1.0, memory_mb=256, pids=64)
    if problem is None:
        limits.create()
        limits.remove()
    jail = {c.name: "pass" if c.ok else f"fail: {c.detail}" for c in run_checks()}
    return {
        "namespaces": "ok" if problem is None else problem,
        "tmux": shutil.which("tmux") or "missing (Terminus-2 needs it)",
        "limits_applied": sorted(set(limits.applied)),
        "limit_problems": limits.problems,
        "sandbox_python": str(default_python_bin()),
        "dsl_packages": {k: package_version(d.distribution) for k, d in DSLS.items()},
        "jail": jail,
    }


def check_handler(args: argparse.Namespace) -> int:
    report = _report()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            if key != "jail":
                print(f"{key:15} {value}")
        print("agent jail:")
        for name, verdict in jail_report(report).items():
            mark = "PASS" if verdict == "pass" else "FAIL"
            print(f"  {mark} {name}" + ("" if verdict == "pass" else f" ({verdict[6:]})"))
        if report["namespaces"] != "ok":
            print(
                "\nThe local sandbox cannot run here. Fall back to Harbor's Docker environment: "
                "set the attempt's environment import path to Docker (-e docker)."
            )
    jail_ok = all(v == "pass" for v in jail_report(report).values())
    ok = report["namespaces"] == "ok" and not str(report["tmux"]).startswith("missing")
    return 0 if ok and jail_ok else 1


def jail_report(report: dict[str, object]) -> dict[str, str]:
    jail = report.get("jail")
    return {str(k): str(v) for k, v in jail.items()} if isinstance(jail, dict) else {}


def prepare_handler(args: argparse.Namespace) -> int:
    from engine.sandbox.venvs import prepare, prepare_plan

    for command in prepare_plan(args.dsl, args.root):
        print("$ " + shlex.join(command))
    if args.dry_run:
        return 0
    bin_dir = prepare(args.dsl, args.root)
    print(f"prepared: attempts on {args.dsl} will use {bin_dir}")
    return 0
