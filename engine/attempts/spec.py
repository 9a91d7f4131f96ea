"""What an attempt is asked to do (AttemptSpec) and how it ended (AttemptOutcome)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.grading.api import Feedback

LOCAL_NS_ENVIRONMENT = "engine.sandbox.local_ns:LocalNamespaceEnvironment"
AttemptState = Literal["finished", "failed", "skipped", "interrupted"]


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


@dataclass
class AttemptSpec:
    """One attempt: a model on a problem × DSL variant under a budget."""

    attempt_id: str
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
    max_tries: int = 3  # per phase, for transient infrastructure failures
    poll_interval_s: float = 0.5

    @property
    def is_transfer(self) -> bool:
        return self.transfer_from is not None


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

    attempt_id: str
    state: AttemptState
    ended_by: str = ""  # task_complete | budget | stop | shell_exited | error | skipped
    final_feedback: Feedback | None = None
    skill: str | None = None
    final_source: str | None = None
    submissions_used: int = 0
    tries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_tokens: int = 0
    cost_usd: float | None = None
    agent_seconds: float = 0.0
    trial_dirs: list[str] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["final_feedback"] = self.final_feedback.to_dict() if self.final_feedback else None
        return data
