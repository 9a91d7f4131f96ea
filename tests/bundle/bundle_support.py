"""A small graded experiment written through the store's own write path, for bundle tests.

p28 in all four arms (replicate 1), each with a final evaluation whose stored feedback is a
CPU-preview verdict; the implementations are real (eager PyTorch, the demo's p28 body), so a
re-grade in CPU preview passes them again. The config names a model API base and key
variable, and the test's fake key, so the secret checks have something to find.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.imports.records import (
    AttemptRecord,
    GradedRecord,
    link_treatments,
    paper_comparisons,
    write_attempt,
    write_comparisons,
)
from storage import writes
from storage.db import immediate, open_db

FAKE_KEY = "sk-mkbtest-7f3a9c1e5b2d4f6a8c0e"
DOTENV_VALUE = "dotenv-only-value-93b1c5e7"  # in .env under a name that looks harmless
P28 = """import torch

EPS = 1e-5


def solve(hidden_states, residual, weight):
    s = hidden_states.float() + residual.float()
    inv = torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return (s * inv * weight.float()).to(hidden_states.dtype)
"""
WRONG = P28.replace("+ EPS)", "+ 1.0)")  # a different eps: fails correctness
CONFIG = f"""[experiment]
name = "bundle-test"
id = "bt"
problems = ["p28"]
grading = "local"

[[models]]
name = "openai/test-model"
api_base = "https://llm.internal.example/v1"
api_key_env = "MKB_TEST_API_KEY"
# the key itself, pasted here by mistake: {FAKE_KEY}
model_info = {{ max_input_tokens = 1000, input_cost_per_token = 0.0 }}

[grading]
kernel_audit = "report"
"""
ARMS = ("solo_cute", "solo_tirx", "cute2tirx_skill", "tirx2cute_skill")


def _feedback(source: str, dsl: str, speedup: float) -> dict[str, Any]:
    ok = source == P28
    return {
        "verdict": "preview" if ok else "fail",
        "reason": None if ok else "correctness.tolerance",
        "problem_id": "p28",
        "dsl": dsl,
        "device": "cpu (preview)",
        "speedup": speedup if ok else None,
        "impl_median_ms": 1.0 / speedup if ok else None,
        "eager_median_ms": 1.0 if ok else None,
        "jailed": True,
        "log_tail": f"worker env dump: MKB_TEST_API_KEY={FAKE_KEY}",
    }


def build_store(
    path: Path,
    *,
    wrong_arm: str | None = None,
    submissions: bool = False,
    experiment_id: str = "bt",
    name: str = "bundle-test",
) -> Path:
    """The store with experiment ``bt`` (created, or added to); ``wrong_arm``'s final fails
    correctness."""
    db = open_db(path)
    with immediate(db):
        writes.create_experiment(db, experiment_id, name, config_toml=CONFIG, preview=True)
        writes.set_experiment_state(db, experiment_id, "finished")
        for i, arm in enumerate(ARMS):
            source = WRONG if arm == wrong_arm else P28
            dsl = "cute" if arm in ("solo_cute", "tirx2cute_skill") else "tirx"
            fb = _feedback(source, dsl, 0.8 + 0.1 * i)
            graded = [GradedRecord("final", 1, source, fb, backend="local")]
            if submissions:
                graded.insert(0, GradedRecord("submission", 1, P28, _feedback(P28, dsl, 0.7)))
            rec = AttemptRecord(
                model="openai/test-model",
                problem_id="p28",
                family="MLP & Norm",
                arm=arm,
                replicate=1,
                state="finished",
                outcome=fb["verdict"] if source == P28 else "fail",
                reason=fb["reason"],
                speedup=fb["speedup"],
                impl_median_ms=fb["impl_median_ms"],
                eager_median_ms=fb["eager_median_ms"],
                final_source=source,
                graded=graded,
                skill=f"# p28 ({arm})\n- measured: rows in float32, one rounding at the end\n"
                + (f"- the sandbox showed MKB_NOTE={DOTENV_VALUE}\n" if i == 0 else ""),
                tokens_in=100,
                tokens_out=10,
            )
            write_attempt(db, experiment_id, rec)
        link_treatments(db, experiment_id)
        write_comparisons(db, experiment_id, paper_comparisons(db, experiment_id))
    db.conn.close()
    return path
