"""Where a submission runner's start-up time goes: imports, the jail, the CUDA context.

    PYTHONPATH=. python3 benchmarks/runner_startup.py [--device cpu|cuda] [--repeats 2]

Times (seconds, each repeated): a bare ``python`` importing torch, each DSL and all of
them; then a runner until its ``ready`` (which includes the CUDA context on a GPU) jailed with
the DSLs preloaded, jailed without, and unjailed with. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.grading.judge.runner_proc import RunnerOptions, RunnerProcess  # noqa: E402

IMPORTS = {
    "torch": "import torch",
    "torch+cuda_context": "import torch; torch.empty(1, device='cuda')",
    "cutlass": "import cutlass, cutlass.cute",
    "tvm": "import tvm, tvm_ffi",
    "all": "import torch, cutlass, cutlass.cute, tvm, tvm_ffi",
}


def timed_import(code: str) -> float | str:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode:
        return "failed: " + done.stderr.strip().splitlines()[-1][:200]
    return round(time.perf_counter() - start, 3)


def runner_ready(options: RunnerOptions) -> float | str:
    start = time.perf_counter()
    try:
        runner = RunnerProcess.spawn(options)
        runner.wait_ready(300)
    except Exception as exc:  # noqa: BLE001 - report, go on
        return f"failed: {exc}"[:200]
    ready = round(time.perf_counter() - start, 3)
    runner.close()
    return ready


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    report: dict[str, object] = {"device": args.device, "imports_s": {}, "runner_ready_s": {}}
    for label, code in IMPORTS.items():
        if "cuda" in label and args.device != "cuda":
            continue
        report["imports_s"][label] = [timed_import(code) for _ in range(args.repeats)]  # type: ignore[index]
    variants = {
        "jailed_preload": RunnerOptions(device=args.device),
        "jailed_no_preload": RunnerOptions(device=args.device, preload_dsls=False),
        "unjailed_preload": RunnerOptions(device=args.device, jail=False),
    }
    for label, options in variants.items():
        times = [runner_ready(options) for _ in range(args.repeats)]
        numbers = [t for t in times if isinstance(t, float)]
        report["runner_ready_s"][label] = {  # type: ignore[index]
            "runs": times,
            "median": statistics.median(numbers) if numbers else None,
        }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
