"""The task's own verifier (``tests/``), for plain ``harbor run`` use.

The engine grades final implementations through a GradingBackend; this script lets a built
task stand alone under Harbor: it checks ``solution.py`` on the CPU against the problem's
reference (the contract's tolerance, via the vendored ``problems.compare``) and writes
``/logs/verifier/reward.json``. It is a preview: ``reward`` is always 0 (never a scored pass)
and ``preview_correct`` says whether the outputs matched.
"""

from __future__ import annotations

TEST_SH = """#!/bin/bash
# Final evaluation in the sandbox: a CPU preview of solution.py (never a scored pass).
mkdir -p /logs/verifier
cd /tests && python3 /tests/final_eval.py --solution {workdir}/{solution} \\
    --out /logs/verifier/reward.json
"""

FINAL_EVAL_PY = r'''"""CPU preview of a solution against the problem's reference (reward.json)."""
import argparse
import importlib.util
import json
import random
import sys
import traceback

sys.path.insert(0, "/tests")

from problems import compare  # noqa: E402  (vendored copy in /tests)
from problems.spec import Workload  # noqa: E402

DRAWS = 2


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluate(solution_path, workload_name):
    problem = load("/tests/problem.py", "mkb_problem")
    workload = Workload(getattr(problem, workload_name))
    try:
        solution = load(solution_path, "mkb_solution")
        solve = solution.solve
    except Exception:  # noqa: BLE001
        return False, "import failed:\n" + traceback.format_exc(limit=3)
    rng = random.SystemRandom()
    for draw in range(DRAWS):
        seed = rng.randrange(1, 2**62)
        inputs = problem.make_inputs(seed, "cpu", workload)
        with compare.reference_numerics():
            v = problem.reference(*compare.clone_inputs(inputs))
            z = problem.reference(*compare.promote(compare.clone_inputs(inputs)))
        try:
            u = solve(*compare.clone_inputs(inputs))
        except Exception:  # noqa: BLE001
            return False, f"draw {draw + 1}: solve raised:\n" + traceback.format_exc(limit=3)
        ok, structure, leaves = compare.check_outputs(u, v, z)
        if not ok:
            detail = structure or "; ".join(c.detail for c in leaves if not c.passed)
            return False, f"draw {draw + 1}: {detail}"
    return True, f"{DRAWS} draws matched the reference"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--solution", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--workload", default="SMOKE", choices=["SMOKE", "WORKLOAD"])
    args = parser.parse_args()
    try:
        ok, detail = evaluate(args.solution, args.workload)
    except FileNotFoundError as exc:
        ok, detail = False, f"missing file: {exc}"
    print(f"PREVIEW (CPU, {args.workload.lower()} workload; never a scored pass): "
          f"{'outputs match' if ok else 'FAILED'}: {detail}")
    with open(args.out, "w") as fh:
        json.dump({"reward": 0.0, "preview_correct": 1.0 if ok else 0.0}, fh)


if __name__ == "__main__":
    main()
'''
