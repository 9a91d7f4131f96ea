"""Where a small call's extra host time comes from, in a plain process: the DSL launch hooks,
CUPTI once attached, CUPTI recording each call (the per-call GPU span), and CUPTI detached.

    PYTHONPATH=. python3 benchmarks/host_overhead_gpu.py OUT.jsonl FILES... [--rounds 3]

Each round starts one fresh process per file (files in alternating order) that times the
solution the way the runner does (``benchmarks/plain_timing.py``: a tiny kernel and a device
synchronize, then ``perf_counter`` around the call and a device-wide synchronize; ``host`` until
the call returns) under these conditions, in this order, because attaching CUPTI cannot be
undone in a process except by ``cuptiFinalize``:

1. ``plain``: nothing installed;            2. ``hooks``: the grader's DSL launch hooks;
3. ``plain_again``: hooks removed (drift);   4. ``cupti_attached``: after one profiled region,
   as the runner's ``warm_profiler`` leaves it;  5. ``hooks_after_cupti``;
6. ``span``: CUPTI recording during every call, read after the clock stops (the per-call GPU
   span: first kernel start to last kernel end), hooks on;  7. ``finalized``: after
   ``cuptiFinalize``, hooks on.

The eager reference is timed in conditions 1 and 4, so its speedup is seen before and after.
Rows go to OUT.jsonl; the summary (per file and condition: median host and end-to-end µs over
rounds, and the difference from ``plain``) goes to OUT.summary.json and is printed. On the CPU
(``--device cpu``) only ``plain`` and ``hooks`` run, as a PREVIEW of the method.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.plain_timing import FILE_NAME, time_calls  # noqa: E402

CONDITIONS = (
    "plain",
    "hooks",
    "plain_again",
    "cupti_attached",
    "hooks_after_cupti",
    "span",
    "finalized",
)


def span_calls(
    fn: Callable[..., Any], make: Callable[[int], list[Any]], calls: int, reader: Any
) -> dict[str, Any]:
    """Like :func:`time_calls`, with CUPTI recording; each call's records read after its clock."""
    import torch

    from engine.grading.runner.cupti_activity import span_ns

    switch = torch.zeros(1, device="cuda")
    clock = time.perf_counter
    e2e: list[float] = []
    host: list[float] = []
    spans: list[float] = []
    reader.start()
    try:
        for i in range(calls):
            inputs = make(1000 + i)
            switch.add_(1.0)
            torch.cuda.synchronize()
            reader.take()  # drop the switch kernel's record
            t0 = clock()
            out = fn(*inputs)
            t1 = clock()
            torch.cuda.synchronize()
            t2 = clock()
            span = span_ns(reader.take())
            host.append((t1 - t0) * 1e6)
            e2e.append((t2 - t0) * 1e6)
            if span is not None:
                spans.append(span / 1e3)
            del out, inputs
    finally:
        reader.stop()
    return {
        "e2e_us": round(statistics.median(e2e), 3),
        "host_us": round(statistics.median(host), 3),
        "span_us": round(statistics.median(spans), 3) if spans else None,
        "span_calls": len(spans),
    }


def child(path: Path, device: str, calls: int) -> dict[str, Any]:
    from engine.grading.runner import cupti_activity, dsl_hooks
    from problems.compare import reference_numerics
    from problems.registry import get

    match = FILE_NAME.match(path.name)
    if match is None:
        raise SystemExit(f"{path}: the name must start with pNN_cute or pNN_tirx")
    problem, dsl = get(match.group(1)), match.group(2)
    cuda = device == "cuda"
    if not cuda:
        import torch

        torch.set_num_threads(1)

    def make(seed: int) -> list[Any]:
        return problem.make_inputs(seed, device, "full" if cuda else "smoke")

    spec = importlib.util.spec_from_file_location("submission", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for seed in (1, 2):
        module.solve(*make(seed))
        with reference_numerics():
            problem.reference(*make(seed))

    def eager() -> dict[str, float]:
        with reference_numerics():
            return time_calls(problem.reference, make, calls, cuda)

    row: dict[str, Any] = {"file": path.name, "problem": problem.id, "dsl": dsl, "device": device}
    row["eager_plain"] = eager()
    row["plain"] = time_calls(module.solve, make, calls, cuda)
    counter = dsl_hooks.install(dsl)
    row["hooks"] = time_calls(module.solve, make, calls, cuda) if counter else None
    if counter is not None:
        counter.uninstall()
    if not cuda:
        return row
    row["plain_again"] = time_calls(module.solve, make, calls, cuda)
    reader = cupti_activity.reader()
    row["cupti"] = reader is not None
    if reader is None:
        return row
    dsl_hooks.warm_profiler()  # what the runner does at its start
    row["eager_cupti_attached"] = eager()
    row["cupti_attached"] = time_calls(module.solve, make, calls, cuda)
    counter = dsl_hooks.install(dsl)
    row["hooks_after_cupti"] = time_calls(module.solve, make, calls, cuda)
    row["span"] = span_calls(module.solve, make, calls, reader)
    # what is measured so far, in case cuptiFinalize takes the process down (the parent keeps
    # the last line printed)
    print(json.dumps(row), flush=True)
    with contextlib.suppress(Exception):
        row["finalize_ok"] = reader.finalize()
        row["finalized"] = time_calls(module.solve, make, calls, cuda)
    if counter is not None:
        counter.uninstall()
    return row


def run_child(path: Path, device: str, calls: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(path), "--device", device, "--calls", str(calls)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"file": path.name, "error": out.stderr[-1500:]}
    row: dict[str, Any] = json.loads(lines[-1])
    if out.returncode != 0:  # e.g. killed by cuptiFinalize: the conditions before it stand
        row["exit"] = {"returncode": out.returncode, "stderr": out.stderr[-500:]}
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name in sorted({r["file"] for r in rows}):
        mine = [r for r in rows if r["file"] == name and "error" not in r]
        per: dict[str, Any] = {}
        for cond in ("eager_plain", "eager_cupti_attached", *CONDITIONS):
            cells = [r[cond] for r in mine if isinstance(r.get(cond), dict)]
            if not cells:
                continue
            per[cond] = {
                key: round(statistics.median(c[key] for c in cells), 2)
                for key in ("host_us", "e2e_us", "span_us")
                if all(c.get(key) is not None for c in cells)
            }
        base = per.get("plain", {})
        for cond, figures in per.items():
            if cond != "plain" and base:
                figures["host_vs_plain_us"] = round(figures["host_us"] - base["host_us"], 2)
                figures["e2e_vs_plain_us"] = round(figures["e2e_us"] - base["e2e_us"], 2)
        summary[name] = {"rounds": len(mine), "errors": len(rows) - len(mine), **per}
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("files", type=Path, nargs="*")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child.resolve(), args.device, args.calls)), flush=True)
        return 0
    if args.out is None or not args.files:
        parser.error("OUT.jsonl and at least one FILE are required")
    rows: list[dict[str, Any]] = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as fh:
        for round_no in range(args.rounds):
            files = args.files if round_no % 2 == 0 else list(reversed(args.files))
            for path in files:
                row = {"round": round_no, **run_child(path.resolve(), args.device, args.calls)}
                rows.append(row)
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                print(json.dumps(row)[:300], flush=True)
    summary = summarize(rows)
    args.out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
