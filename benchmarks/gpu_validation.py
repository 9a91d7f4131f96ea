"""Grade the reference solutions and the negative controls on a GPU, through the local
backend (warm parent, real DSL launch counting and bypass), and write one JSON per file.

    PYTHONPATH=. python3 benchmarks/gpu_validation.py OUT_DIR [FILES...]

Without FILES: every ``problems/solutions/pNN_{cute,tirx}.py`` plus two controls that must
fail — plain PyTorch (``dsl.no_launch``) and a CuTe kernel whose output is unused
(``dsl.bypass_still_valid``).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.grading.api import GradeRequest  # noqa: E402
from engine.grading.backends.local import LocalBackend  # noqa: E402

CONTROLS = [
    ("p28", "cute", REPO / "tests/grading/fixtures/honest/p28_plain.py", "dsl.no_launch"),
    (
        "p28",
        "cute",
        REPO / "tests/grading/fixtures/gpu/p28_cute_unused_kernel.py",
        "dsl.bypass_still_valid",
    ),
]


def jobs(files: list[str]) -> list[tuple[str, str, Path, str | None]]:
    if files:
        out = []
        for f in files:
            m = re.match(r"(p\d\d)_(cute|tirx)", Path(f).name)
            if not m:
                raise SystemExit(f"{f}: name must start with pNN_cute or pNN_tirx")
            out.append((m.group(1), m.group(2), Path(f).resolve(), None))
        return out
    solutions = sorted((REPO / "problems" / "solutions").glob("p[0-9][0-9]_*.py"))
    found = []
    for path in solutions:
        m = re.match(r"(p\d\d)_(cute|tirx)\.py$", path.name)
        if m:
            found.append((m.group(1), m.group(2), path, "pass"))
    return found + [(p, d, f, want) for p, d, f, want in CONTROLS]


async def main(out_dir: Path, files: list[str]) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    backend = LocalBackend(gpus="auto")
    t0 = time.perf_counter()
    await backend.start()
    summary = {"warm_start_s": round(time.perf_counter() - t0, 2), "results": []}
    for problem, dsl, path, expected in jobs(files):
        start = time.perf_counter()
        fb = await backend.grade(
            GradeRequest(problem, dsl, path.read_text(), device="cuda", request_id=path.name)
        )
        wall = time.perf_counter() - start
        got = "pass" if fb.verdict == "pass" else fb.reason
        row = {
            "file": str(path.relative_to(REPO)),
            "problem": problem,
            "dsl": dsl,
            "verdict": fb.verdict,
            "reason": fb.reason,
            "expected": expected,
            "as_expected": expected is None or got == expected,
            "speedup": fb.speedup,
            "impl_median_ms": fb.impl_median_ms,
            "eager_median_ms": fb.eager_median_ms,
            "dsl_launches_per_call": fb.dsl_launches_per_call,
            "bypass": fb.bypass,
            "kernel_audit": (fb.kernel_audit or {}).get("status"),
            "message": fb.message[:500],
            "wall_s": round(wall, 2),
            "timings_s": fb.timings_s,
            "clock": fb.clock,
            "flags": fb.flags,
            "impl_event_median_ms": fb.impl_event_median_ms,
        }
        summary["results"].append(row)
        (out_dir / f"{path.stem}.json").write_text(json.dumps(fb.to_dict(), indent=1, default=str))
        print(json.dumps(row, default=str), flush=True)
    await backend.close()
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    sys.exit(asyncio.run(main(Path(sys.argv[1]), sys.argv[2:])))
