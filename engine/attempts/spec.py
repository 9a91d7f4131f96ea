"""The attempt contract: what an attempt is asked to do (:class:`AttemptSpec`) and how it
ended (:class:`AttemptOutcome`).

The scheduler builds one spec per try (:func:`spec_for_node`), any attempt runner (the
Terminus-2 runner, the simulated one, a test's) takes it and returns an outcome, and the
scheduler stores that outcome as it is. An attempt is named by its ``attempts.id`` (an int)
throughout; whether it can run at all is decided in one place, :meth:`AttemptSpec.skip_reason`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from engine.grading.api import Feedback
from engine.retry import RetryPolicy
from problems.targets import concrete_gpu

if TYPE_CHECKING:
    from engine.config import ExperimentConfig, ModelConfig
    from engine.plan import PlanNode

LOCAL_NS_ENVIRONMENT = "engine.sandbox.local_ns:LocalNamespaceEnvironment"
SANDBOX_IMPORT_PATHS = {
    "local": LOCAL_NS_ENVIRONMENT,
    "docker": "docker",
    "modal": "modal",
    "daytona": "daytona",
}
AttemptId = int  # the attempt's row id in the store, everywhere
AttemptState = Literal["finished", "failed", "skipped", "interrupted"]
BLANK_SOURCE_SKILL = "blank_or_missing_source_skill"


@dataclass
class ModelSpec:
    """A model reached through litellm (``openai/<name>`` for OpenAI-compatible servers)."""

    name: str
    api_base: str | None = None
    api_key_env: str | None = None  # name of the environment variable holding the key
    model_info: dict[str, Any] | None = None  # max_input_tokens, costs… (for summarisation)
    temperature: float | None = None
    # further Terminus-2 kwargs; "scenario" (a bundled name or a TOML path) asks for a
    # scripted stand-in model, served by an injected endpoint (see ModelEndpoint)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, model: ModelConfig, *, llm_limit: bool = False) -> ModelSpec:
        """The spec of a ``[[models]]`` entry (``llm_limit``: the per-model call limit is on)."""
        extra: dict[str, Any] = {}
        if model.scenario:  # a scripted stand-in model serves this attempt
            extra["scenario"] = model.scenario
        if llm_limit:
            extra["llm_limit"] = model.name
        return cls(
            name=model.name,
            api_base=model.api_base,
            api_key_env=model.api_key_env,
            model_info=model.model_info or None,
            extra=extra,
        )


@dataclass
class AttemptSpec:
    """One try of one attempt: a model on a problem × DSL variant under a budget."""

    attempt_id: AttemptId
    problem_id: str
    dsl: str
    model: ModelSpec
    work_dir: Path
    budget_s: int = 40 * 60
    max_submissions: int = 10
    source_skill: str | None = None  # a transferred skill (skill-conditioned arms)
    transfer_from: str | None = None  # source DSL; set for skill-conditioned arms
    # "module:Class", a Harbor environment type ("docker", "modal", …) or "local"
    environment_import_path: str = LOCAL_NS_ENVIRONMENT
    environment_kwargs: dict[str, Any] = field(default_factory=dict)
    grading_device: str = "auto"
    gpu: str = "h200"  # the grading target (problems/targets.py): the task names its arch
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    poll_interval_s: float = 0.5
    experiment_id: str = ""
    try_number: int = 1  # the scheduler's try of this attempt (attempts.tries)
    node: PlanNode | None = None  # where the attempt sits in the plan, when planned

    @property
    def is_transfer(self) -> bool:
        return self.transfer_from is not None

    def skip_reason(self) -> str | None:
        """Why this attempt cannot run (a transfer without a skill to attach), else None."""
        if self.is_transfer and not (self.source_skill or "").strip():
            return BLANK_SOURCE_SKILL
        return None


def sandbox_kwargs(config: ExperimentConfig, options: dict[str, Any]) -> dict[str, Any]:
    """The environment kwargs: the ``[sandbox]`` options, plus the jail opt-out when set."""
    kwargs = dict(options)
    if config.unsafe_no_jail:
        kwargs["unsafe_no_jail"] = True
    return kwargs


def spec_for_node(
    config: ExperimentConfig,
    node: PlanNode,
    attempt_id: AttemptId,
    *,
    try_number: int,
    source_skill: str | None,
    work_dir: Path,
) -> AttemptSpec:
    """The spec of one try of a planned attempt."""
    limit = config.concurrency.llm_calls_per_model is not None
    return AttemptSpec(
        attempt_id=attempt_id,
        problem_id=node.problem_id,
        dsl=node.dsl,
        model=ModelSpec.from_config(config.model(node.model), llm_limit=limit),
        work_dir=work_dir,
        budget_s=int(config.budget_s),
        max_submissions=config.max_submissions,
        source_skill=source_skill,
        transfer_from=("cute" if node.dsl == "tirx" else "tirx") if node.is_treatment else None,
        environment_import_path=SANDBOX_IMPORT_PATHS.get(config.sandbox, config.sandbox),
        environment_kwargs=sandbox_kwargs(config, config.sandbox_options),
        gpu=concrete_gpu(config.gpu),
        retry=RetryPolicy.from_config(config),
        experiment_id=config.id,
        try_number=try_number,
        node=node,
    )


class ModelEndpointError(Exception):
    """The attempt's model endpoint could not be set up (e.g. an unknown scripted scenario)."""


# How an attempt reaches its model: ``endpoint(spec)`` yields the spec to run (an endpoint may
# start a server for the attempt and point the model at it) and cleans up on exit. The
# production one (``engine.attempts.runner.direct_endpoint``) uses the model as given; the
# scripted stand-in (``engine.standins.scripted_llm.scripted_endpoint``) is injected by the
# factory for ``[[models]] scenario = ...``.
ModelEndpoint = Callable[["AttemptSpec"], AbstractAsyncContextManager["AttemptSpec"]]


@dataclass
class AttemptOutcome:
    """How an attempt ended, with its final evaluation and collected artifacts."""

    attempt_id: AttemptId
    state: AttemptState
    ended_by: str = ""  # task_complete | budget | stop | shell_exited | error | skipped
    final_feedback: Feedback | None = None
    skill: str | None = None
    final_source: str | None = None
    submissions_used: int = 0
    tries: int = 0  # execution tries the runner made
    input_tokens: int = 0
    output_tokens: int = 0
    cache_tokens: int = 0
    cost_usd: float | None = None
    agent_seconds: float = 0.0
    trial_dirs: list[str] = field(default_factory=list)
    error: str | None = None
    # a failure the runner did not retry itself: the retry policy may rerun the attempt
    retryable: bool = True

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["final_feedback"] = self.final_feedback.to_dict() if self.final_feedback else None
        return data
