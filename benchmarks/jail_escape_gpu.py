"""The grading jail's escape probes on a GPU host, through the warm local backend.

    PYTHONPATH=. python3 benchmarks/jail_escape_gpu.py [--device cuda] > escape.jsonl

Each probe (``tests/grading/escape_probes.py``) computes the honest result only if its escape
works, zeros otherwise. Jailed, every probe must fail ``correctness.tolerance``; the same probe
unjailed (``--unsafe-no-jail``, the positive control) must pass the correctness draws, so it
ends as ``dsl.no_launch`` on a GPU (plain torch) or ``preview`` on CPU. One JSON line each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.grading.api import GradeRequest  # noqa: E402
from engine.grading.backends.local import LocalBackend  # noqa: E402
from engine.grading.options import EvalConfig  # noqa: E402
from engine.grading.parent.evaluate import resolve_device  # noqa: E402
from tests.grading.escape_probes import PROBES, canaries, probe_source, probes  # noqa: E402


async def grade_all(device: str, jailed: bool, found: dict[str, str]) -> list[dict]:
    config = EvalConfig(unsafe_no_jail=not jailed, dsl_checks=False)  # plain-torch probes
    backend = LocalBackend(gpus="auto" if device == "cuda" else None, config=config)
    await backend.start()
    rows = []
    try:
        for name in PROBES:
            request = GradeRequest("p28", "cute", probe_source(probes(found)[name]), device=device)
            fb = await backend.grade(request)
            planted = Path(found["planted"])
            wrote = planted.exists()
            planted.unlink(missing_ok=True)
            escaped = fb.verdict in ("pass", "preview") or wrote
            rows.append(
                {
                    "probe": name,
                    "jailed": fb.jailed,
                    "verdict": fb.verdict,
                    "reason": fb.reason,
                    "wrote_host_file": wrote,
                    "escaped": escaped,
                    "as_expected": escaped != jailed,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    finally:
        await backend.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    with canaries() as found:
        jailed = asyncio.run(grade_all(device, True, found))
        control = asyncio.run(grade_all(device, False, found))
    stopped = sum(not r["escaped"] for r in jailed)
    escaped = sum(r["escaped"] for r in control)
    print(
        f"jailed: {stopped}/{len(jailed)} probes stopped; "
        f"unjailed control: {escaped}/{len(control)} escaped",
        flush=True,
    )
    return 0 if stopped == len(jailed) else 1


if __name__ == "__main__":
    sys.exit(main())
