"""The demo experiment: two catalog problems, one scripted model, all four arms.

A scripted stand-in model (an OpenAI-compatible server on 127.0.0.1 replaying
``engine/standins/scenarios/{problem}_{kind}.toml``) drives the real Harbor Terminus-2 agent in the
local namespace sandbox; the local grader evaluates every submission (a CPU preview where no
GPU exists). Both transfer directions resolve, so every view has data.
"""

from __future__ import annotations

from engine.config import ExperimentConfig, parse_config

DEMO_PROBLEMS = ("p28", "p36")

DEMO_CONFIG = f"""
[experiment]
name = "demo"
id = "demo"
problems = {list(DEMO_PROBLEMS)!r}
dsls = ["cute", "tirx"]
replicates = 1
budget_minutes = 10
max_submissions = 10
sandbox = "local"
grading = "local"

[[models]]
name = "openai/scripted-demo"
scenario = "{{problem}}_{{kind}}"

[models.model_info]
max_input_tokens = 200000
max_output_tokens = 8000
input_cost_per_token = 0.0
output_cost_per_token = 0.0

[concurrency]
sandboxes = 2
attempts_per_model = 2
grading_slots = 1
"""


def demo_config() -> ExperimentConfig:
    return parse_config(DEMO_CONFIG, "<demo>")
