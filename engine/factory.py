"""Build the attempt runner and grading backend an experiment config asks for.

This is the engine's composition root: the one place that picks a stand-in
(:mod:`engine.standins`) when a config asks for one (``agent``/``grading = "simulated"``, a
``scenario`` model); the production modules it wires never import stand-ins themselves.
Imports are lazy so a config that uses simulated parts never loads Harbor or the grader.
"""

from __future__ import annotations

from typing import Any

from engine.config import ExperimentConfig
from engine.grading.api import GradingBackend
from engine.scheduler import AttemptJob, AttemptResult, AttemptRunner

SANDBOX_IMPORT_PATHS = {
    "local": "engine.sandbox.local_ns:LocalNamespaceEnvironment",
    "docker": "docker",
    "modal": "modal",
    "daytona": "daytona",
}


def make_backend(config: ExperimentConfig) -> GradingBackend:
    """The grading backend named by ``[experiment].grading`` with ``[grading]`` options."""
    options = dict(config.grading_options)
    if config.grading == "simulated":
        from engine.standins.simulated import SimulatedBackend

        return SimulatedBackend()
    from engine.grading.evaluate import EvalConfig

    eval_config = EvalConfig(
        kernel_audit=options.pop("kernel_audit", "report"),
        unsafe_no_jail=config.unsafe_no_jail,  # the same explicit choice covers grading
    )
    if config.grading == "local":
        from engine.grading.local import LocalBackend

        return LocalBackend(config=eval_config, **options)  # type: ignore[no-any-return]
    if config.grading == "http":
        # the http client pool with a cooldown for hosts that just failed
        from engine.grading.fleet import FleetBackend

        return FleetBackend(**options)
    from engine.grading.harbor_backend import HarborBackend, HarborConfig

    return HarborBackend(HarborConfig(**options), eval_config)


class Terminus2Runner:
    """Adapts :func:`engine.attempts.runner.run_attempt` to the scheduler's runner interface."""

    retries_grading = True  # its mailbox retries failed gradings (up to max_tries)

    def __init__(self, config: ExperimentConfig) -> None:
        from engine.attempts.agent import set_llm_limit

        self.config = config
        for model in config.models:
            set_llm_limit(model.name, config.concurrency.llm_calls_per_model)

    async def __call__(
        self, job: AttemptJob, backend: GradingBackend, observer: Any
    ) -> AttemptResult:
        from engine.attempts.runner import run_attempt
        from engine.attempts.spec import AttemptSpec, ModelSpec

        node = job.node
        extra: dict[str, Any] = {}
        endpoint = None
        if job.model.scenario:  # a scripted stand-in model serves this attempt
            from engine.standins.scripted_llm import scripted_endpoint

            extra["scenario"] = job.model.scenario
            endpoint = scripted_endpoint
        if self.config.concurrency.llm_calls_per_model is not None:
            extra["llm_limit"] = job.model.name  # the agent's per-model call limit
        spec = AttemptSpec(
            attempt_id=str(job.attempt_id),
            problem_id=node.problem_id,
            dsl=node.dsl,
            model=ModelSpec(
                name=job.model.name,
                api_base=job.model.api_base,
                api_key_env=job.model.api_key_env,
                model_info=job.model.model_info or None,
                extra=extra,
            ),
            work_dir=job.work_dir,
            budget_s=int(job.budget_s),
            max_submissions=job.max_submissions,
            source_skill=job.source_skill,
            transfer_from=("cute" if node.dsl == "tirx" else "tirx") if node.is_treatment
            else None,
            environment_import_path=SANDBOX_IMPORT_PATHS.get(job.sandbox, job.sandbox),
            environment_kwargs=sandbox_kwargs(self.config, job.sandbox_options),
            max_tries=self.config.max_tries,
        )
        outcome = await run_attempt(spec, backend, observer, endpoint=endpoint)
        state = outcome.state if outcome.state in ("finished", "failed", "interrupted") else (
            "failed")
        return AttemptResult(
            state=state,
            final=outcome.final_feedback,
            skill=outcome.skill,
            final_source=outcome.final_source,
            submissions_used=outcome.submissions_used,
            tokens_in=outcome.input_tokens,
            tokens_out=outcome.output_tokens,
            cost_usd=outcome.cost_usd or 0.0,
            agent_seconds=outcome.agent_seconds,
            error=outcome.error,
            retryable=False,
        )


def sandbox_kwargs(config: ExperimentConfig, options: dict[str, Any]) -> dict[str, Any]:
    """The environment kwargs: the ``[sandbox]`` options, plus the jail opt-out when set."""
    kwargs = dict(options)
    if config.unsafe_no_jail:
        kwargs["unsafe_no_jail"] = True
    return kwargs


def make_runner(config: ExperimentConfig) -> AttemptRunner:
    if config.agent == "simulated":
        from engine.standins.simulated import SimulatedRunner

        options = {"submissions": config.max_submissions, **config.agent_options}
        return SimulatedRunner(**options)
    return Terminus2Runner(config)
