"""Build the attempt runner and grading backend an experiment config asks for.

This is the engine's composition root: the one place that picks a stand-in
(:mod:`engine.standins`) when a config asks for one (``agent``/``grading = "simulated"``, a
``scenario`` model); the production modules it wires never import stand-ins themselves.
Imports are lazy so a config that uses simulated parts never loads Harbor or the grader.
"""

from __future__ import annotations

from typing import Any

from engine.attempts.spec import AttemptOutcome, AttemptSpec, sandbox_kwargs
from engine.config import ExperimentConfig
from engine.grading.api import GradingBackend
from engine.scheduler import AttemptRunner

__all__ = ["Terminus2Runner", "make_backend", "make_runner", "sandbox_kwargs"]


def make_backend(config: ExperimentConfig) -> GradingBackend:
    """The grading backend named by ``[experiment].grading`` with ``[grading]`` options."""
    options = dict(config.grading_options)
    if config.grading == "simulated":
        from engine.standins.simulated import SimulatedBackend

        return SimulatedBackend(**options)  # e.g. noise_cv: runtime noise per problem
    from engine.grading.options import EvalConfig, from_config

    eval_config = EvalConfig(
        **from_config(options),  # the contract's options (engine/grading/options.py)
        unsafe_no_jail=config.unsafe_no_jail,  # the same explicit choice covers grading
    )
    if config.grading == "local":
        from engine.grading.backends.local import LocalBackend

        return LocalBackend(config=eval_config, **options)  # type: ignore[no-any-return]
    if config.grading == "http":
        # the http client pool with a cooldown for hosts that just failed
        from engine.grading.backends.fleet import FleetBackend

        return FleetBackend(**options)
    if config.grading == "ray":
        return _ray_backend(options.get("ray"), eval_config)
    from engine.grading.backends.harbor import HarborBackend, HarborConfig

    return HarborBackend(HarborConfig(**options), eval_config)


def _ray_backend(table: Any, eval_config: Any) -> GradingBackend:
    """One grader actor per GPU of a Ray cluster, grading with the local backend's warm slot
    (or, with ``grader = "simulated"``, the stand-in simulated grading; tests, benchmarks)."""
    from engine.grading.backends.ray import RayBackend
    from engine.grading.backends.ray_actor import GraderBuilder, LocalGrader
    from engine.grading.backends.ray_options import from_table

    options, grader, (low, high) = from_table(table)
    builder: GraderBuilder = LocalGrader(eval_config)
    if grader == "simulated":
        from engine.standins.ray_grader import SimulatedGrader

        builder = SimulatedGrader(low, high)
    return RayBackend(options, builder)


class Terminus2Runner:
    """Runs an attempt's try with :func:`engine.attempts.runner.run_attempt` (the scheduler's
    runner interface); a ``scenario`` model is served by the scripted stand-in endpoint."""

    def __init__(self, config: ExperimentConfig) -> None:
        from engine.attempts.agent import set_llm_limit

        self.config = config
        for model in config.models:
            set_llm_limit(model.name, config.concurrency.llm_calls_per_model)

    async def __call__(
        self, spec: AttemptSpec, backend: GradingBackend, observer: Any
    ) -> AttemptOutcome:
        from engine.attempts.runner import run_attempt

        endpoint = None
        if "scenario" in spec.model.extra:  # a scripted stand-in model serves this attempt
            from engine.standins.scripted_llm import scripted_endpoint

            endpoint = scripted_endpoint
        return await run_attempt(spec, backend, observer, endpoint=endpoint)


def make_runner(config: ExperimentConfig) -> AttemptRunner:
    if config.agent == "simulated":
        from engine.standins.simulated import SimulatedRunner

        options = {"submissions": config.max_submissions, **config.agent_options}
        return SimulatedRunner(**options)
    return Terminus2Runner(config)
