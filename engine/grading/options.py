"""The knobs of one evaluation (:class:`EvalConfig`) and the one table that maps the contract's
options to the command line (``mkb grade``, ``mkb grader serve``), an experiment's
``[grading]`` table and the job the judge reads.

An option is declared once, in :data:`CONTRACT_OPTIONS`; :func:`add_arguments`,
:func:`from_args`, :func:`check_config`, :func:`from_config` and :func:`job_options` all read
that table, so a new option needs one line there and a field on :class:`EvalConfig`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.grading.judge.kernel_audit import MODES as KERNEL_AUDIT_MODES
from engine.grading.judge.kernel_audit import MODES_HELP as KERNEL_AUDIT_HELP
from engine.grading.parent.supervise import Limits

# (correctness draws, warmup calls, timed calls, rechecks)
GPU_COUNTS = (5, 10, 50, 3)
PREVIEW_COUNTS = (5, 2, 10, 3)


@dataclass
class EvalConfig:
    """Knobs of one evaluation; defaults follow the contract."""

    timeout_s: float = 600.0
    eager_timeout_s: float = 600.0
    memory_limit_mb: int | None = None  # None: 16 GiB in CPU preview, 64 GiB host RSS on GPU
    scale: str | None = None  # None: "full" on GPU, "smoke" in CPU preview
    counts: tuple[int, int, int, int] | None = None  # None: GPU_COUNTS / PREVIEW_COUNTS
    env: dict[str, str] = field(default_factory=dict)  # extra child environment
    problem_paths: dict[str, str] = field(default_factory=dict)  # id → file (tests, drafts)
    dsl_checks: bool | None = None  # None: on GPU only; True also on CPU (tests, stand-in DSL)
    # Profiler cross-check of DSL launches: "report" records it, "enforce" also rejects an
    # unconfirmed launch (dsl.launch_unconfirmed), "off" skips the extra profiled call.
    kernel_audit: str = "report"
    # Run submissions without the bubblewrap jail (recorded on the feedback); never the default.
    unsafe_no_jail: bool = False
    # submission runners each warm slot keeps started ahead (each imports torch and the DSLs
    # in seconds; back-to-back evaluations on a GPU want several)
    spare_runners: int = 2
    # fork each jailed runner from the slot's runner template (a jailed process that imported
    # torch and the DSLs once; docs/grading.md, "The runner template") instead of starting it
    runner_template: bool = True
    # Busy-poll this long in each runner after staging a call's inputs, before answering, so
    # its core is awake when the call comes (outside every clock; both runners alike). Off
    # until a GPU run shows it helps (docs/grading.md, "The small-call spread"); at most 50 ms.
    stage_warmup_ms: float = 0.0
    # Keep a per-call trace of the timed calls (figures, the CPUs the runner and the judge
    # ran on, steal ticks) in ``clock.call_trace``: diagnostics, off by default.
    call_trace: bool = False
    # Precede each warm-up and timed call, on both sides, with an untimed call on the previous
    # call's inputs (outputs dropped), so the call is timed with its code and data in the
    # caches rather than evicted by the judge's checks in between. Never for problems with
    # in-place outputs (their previous inputs were written). Off until a GPU run shows it
    # helps (docs/grading.md, "Warm calls").
    warm_calls: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.stage_warmup_ms <= 50.0:
            raise ValueError(f"stage_warmup_ms must be within 0..50, not {self.stage_warmup_ms}")
        if self.kernel_audit not in KERNEL_AUDIT_MODES:
            raise ValueError(
                f"kernel_audit must be one of {KERNEL_AUDIT_MODES}, not {self.kernel_audit!r}"
            )

    def limits(self, device: str) -> Limits:
        memory = self.memory_limit_mb
        if memory is None:
            memory = 16 * 1024 if device == "cpu" else 64 * 1024
        return Limits(self.timeout_s, self.eager_timeout_s, memory)


@dataclass(frozen=True)
class ContractOption:
    """One option of the grading contract and everywhere it can be set or is recorded."""

    name: str  # the EvalConfig field and the job key
    help: str
    choices: tuple[str, ...] = ()  # a string option's values; none: a true/false switch
    commands: tuple[str, ...] = ()  # "grade" (mkb grade), "serve" (mkb grader serve)
    in_config: bool = False  # settable in an experiment's [grading] table
    recorded_as: str | None = None  # where the feedback records it

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def is_switch(self) -> bool:
        return not self.choices

    def valid(self, value: Any) -> bool:
        return isinstance(value, bool) if self.is_switch else value in self.choices

    @property
    def requirement(self) -> str:
        return "must be true/false" if self.is_switch else f"must be one of {self.choices}"


CONTRACT_OPTIONS: tuple[ContractOption, ...] = (
    ContractOption(
        "kernel_audit",
        KERNEL_AUDIT_HELP,
        choices=KERNEL_AUDIT_MODES,
        commands=("grade", "serve"),
        in_config=True,
        recorded_as="kernel_audit",
    ),
    ContractOption(
        "warm_calls",
        "precede each warm-up and timed call, on both sides, with an untimed call on the "
        "previous inputs, so calls are timed with their code in the caches",
        commands=("grade", "serve"),
        in_config=True,
        recorded_as="clock.warm_calls",
    ),
    ContractOption(
        "call_trace",
        "record each timed call's figures and CPUs in the feedback",
        commands=("grade",),
        recorded_as="clock.call_trace",
    ),
    ContractOption(
        "unsafe_no_jail",
        "UNSAFE: run the submission without the bubblewrap grading jail (it can then read "
        "and write the host)",
        commands=("grade", "serve"),
        recorded_as="jailed",
    ),
    ContractOption("stage_warmup_ms", "the runners' busy poll after staging (ms)"),
)
# the options the judge reads from its job, beyond the request itself
JOB_OPTIONS = tuple(option.name for option in CONTRACT_OPTIONS)
# the backends that grade with this host's judge, and so take the contract's options from
# ``[grading]`` (an http grader sets its own with ``mkb grader serve``)
CONFIG_BACKENDS = ("local", "harbor", "ray")
DEFAULTS = EvalConfig()


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The contract's options of ``command`` ("grade" or "serve") as command-line flags."""
    for option in CONTRACT_OPTIONS:
        if command not in option.commands:
            continue
        help_text = option.help + (
            f" (recorded as {option.recorded_as})"
            if option.recorded_as and option.is_switch
            else ""
        )
        if option.is_switch:
            parser.add_argument(option.flag, action="store_true", help=help_text)
        else:
            parser.add_argument(
                option.flag,
                choices=option.choices,
                default=getattr(DEFAULTS, option.name),
                help=help_text,
            )


def from_args(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """EvalConfig keyword arguments from the flags :func:`add_arguments` added."""
    return {o.name: getattr(args, o.name) for o in CONTRACT_OPTIONS if command in o.commands}


def check_config(
    options: Mapping[str, Any], grading: str, where: str, expect: Callable[[bool, str, str], None]
) -> None:
    """Check the contract's options in an experiment's ``[grading]`` table: each applies to
    local and harbor grading (an http grader sets its own) and has a valid value."""
    for option in CONTRACT_OPTIONS:
        if not option.in_config or option.name not in options:
            continue
        at = f"{where}.{option.name}"
        expect(
            grading in CONFIG_BACKENDS,
            at,
            f"applies to {', '.join(CONFIG_BACKENDS)} grading (an http grader sets its own with "
            f"mkb grader serve {option.flag})",
        )
        expect(option.valid(options[option.name]), at, option.requirement)


def config_keys() -> tuple[str, ...]:
    """The ``[grading]`` keys that set the contract's options."""
    return tuple(o.name for o in CONTRACT_OPTIONS if o.in_config)


def from_config(options: dict[str, Any]) -> dict[str, Any]:
    """EvalConfig keyword arguments popped from an experiment's ``[grading]`` options."""
    return {name: options.pop(name) for name in config_keys() if name in options}


def job_options(config: EvalConfig) -> dict[str, Any]:
    """The contract's options as the judge's job carries them."""
    return {name: getattr(config, name) for name in JOB_OPTIONS}
