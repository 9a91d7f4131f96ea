"""Grade every reference solution on a CUDA host, one JSON feedback per solution.

    PYTHONPATH=. python3 benchmarks/check_solutions_gpu.py OUT_DIR [p28 p25 ...] [--dsl cute]

Runs ``engine.grading`` exactly as ``mkb grade PNN --dsl DSL FILE --device cuda`` does (a
fresh worker per solution, full workload, every check including the DSL launch count and the
bypass test) and writes ``OUT_DIR/<file stem>.json`` plus ``OUT_DIR/summary.json``. Prints one
line per solution. Exit 0 iff every graded solution passed.

It lives here, not beside the solutions: ``problems/`` holds plain specs and data and imports
nothing of the engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "problems" / "solutions"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def solution_files(only: list[str], dsl: str | None) -> list[Path]:
    """Solution files ``pNN_<dsl>.py``, optionally restricted to problem ids and one DSL."""
    files = sorted(SOLUTIONS.glob("p[0-9][0-9]_*.py"))
    picked = [f for f in files if not only or f.name.split("_")[0] in only]
    return [f for f in picked if dsl is None or f.stem.split("_", 1)[1] == dsl]


def variant_files(only: list[str], dsl: str | None, arch: str) -> list[Path]:
    """Variant files ``variants/pNN_<dsl>_*.py`` that declare ``arch`` in their ``ARCHS``."""
    from problems.solutions.compile_check import declares

    picked = []
    for path in sorted((SOLUTIONS / "variants").glob("p[0-9][0-9]_*.py")):
        problem_id, variant_dsl = path.stem.split("_")[:2]
        if only and problem_id not in only or dsl is not None and variant_dsl != dsl:
            continue
        if declares(path, arch):
            picked.append(path)
    return picked


def device_arch() -> str:
    """The architecture of this host's GPU: sm_100a on a Blackwell, sm_90a otherwise."""
    import torch

    major, _ = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
    return "sm_100a" if major >= 10 else "sm_90a"


def summarize(stem: str, fb: dict[str, object], seconds: float) -> dict[str, object]:
    """The fields of a feedback worth a glance."""
    keys = (
        "verdict",
        "reason",
        "message",
        "speedup",
        "impl_median_ms",
        "eager_median_ms",
        "dsl_launches_per_call",
        "bypass",
    )
    row: dict[str, object] = {"solution": stem, "wall_s": round(seconds, 1)}
    row.update({k: fb.get(k) for k in keys})
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("only", nargs="*", help="problem ids (default: all)")
    parser.add_argument("--dsl", choices=("cute", "tirx"), default=None)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a preview)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--variants",
        action="store_true",
        help="also the variants that declare this GPU's arch (e.g. the tcgen05 p52 on a B200)",
    )
    args = parser.parse_args(argv)

    from engine.grading.api import GradeRequest
    from engine.grading.options import EvalConfig
    from engine.grading.parent.evaluate import grade_in_subprocess

    args.out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    files = solution_files(args.only, args.dsl)
    if args.variants:
        files += variant_files(args.only, args.dsl, device_arch())
    for path in files:
        problem_id, dsl = path.stem.split("_")[:2]
        source = path.read_text(encoding="utf-8")
        request = GradeRequest(problem_id, dsl, source, device=args.device, request_id=path.name)
        start = time.monotonic()
        feedback = grade_in_subprocess(request, EvalConfig(timeout_s=args.timeout), args.device)
        data = feedback.to_dict()
        (args.out_dir / f"{path.stem}.json").write_text(json.dumps(data, indent=2, default=str))
        row = summarize(path.stem, data, time.monotonic() - start)
        rows.append(row)
        speedup = row["speedup"]
        shown = f"{speedup:.2f}x" if isinstance(speedup, (int, float)) else "-"
        print(
            f"{path.stem:14s} {row['verdict']!s:8s} {row['reason']!s:28s} speedup {shown:>8s} "
            f"launches {row['dsl_launches_per_call']} bypass {row['bypass']} "
            f"({row['wall_s']} s)",
            flush=True,
        )
    (args.out_dir / "summary.json").write_text(json.dumps(rows, indent=2, default=str))
    return 0 if rows and all(r["verdict"] == "pass" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
