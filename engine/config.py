"""Experiment configuration: a TOML file, validated completely before anything starts.

```toml
[experiment]
name = "paper-replication"        # required
id = "paper-replication"          # optional; defaults to the name made safe
problems = ["p01", "p2*"]         # ids, NN, slugs or globs; default: all
families = ["KV Cache"]           # optional family filter
dsls = ["cute", "tirx"]           # both are needed for transfer
replicates = 1
budget_minutes = 40
max_submissions = 10
sandbox = "local"                 # local | docker | modal | daytona | an import path
unsafe_no_jail = false            # local only: run agents without the bubblewrap jail (UNSAFE)
grading = "local"                 # local | http | harbor | ray (| simulated, for tests)
agent = "terminus-2"              # terminus-2 (| simulated: instant fake agents, for tests)

[[models]]
name = "openai/gpt-4.1"           # a litellm model name
api_base = "https://…"            # optional
api_key_env = "OPENAI_API_KEY"    # optional: the variable in the environment / .env
model_info = { max_input_tokens = 128000, max_output_tokens = 16384 }

[concurrency]
sandboxes = 4                     # attempts running at once
attempts_per_model = 2            # attempts of one model running at once
grading_slots = 1                 # evaluations at once (one per GPU); feedback before finals
# llm_calls_per_model = 1         # model calls in flight per model (default: no extra limit)

[grading]
gpu = "auto"                      # b200 | h200 | h100 | auto: what the grading host reports
final_repeats = 1                 # gradings of each passing final, spread in time (median scores)
paired_repeats = 0                # 0 | k | "adaptive": each resolved comparison's two finals
                                  # graded k times each, in pairs (random order), on one slot
paired_max = 10                   # with "adaptive": the most pairs before the test decides

[retry]
rerun_failed = true               # rerun attempts that ended in an infrastructure failure
max_tries = 3

[control]                         # what `mkb attempt extend` may add to one attempt, in all
max_extra_minutes = 40            # default: the experiment's budget_minutes
max_extra_submissions = 10        # default: the experiment's max_submissions

[[transfers]]                     # optional edges beyond the paper's four arms
kind = "cross_model"              # source model's solo skill → target model's treatment
source_model = "a"
target_model = "b"

[[transfers]]
kind = "chain"                    # treatment skills become the next round's sources
rounds = 2

[[transfers]]
kind = "edited_skill"             # a person's edited skill (ablation)
problem = "p28"
direction = "cute->tirx"
skill_file = "skills/p28-edited.md"
```
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import grading_table
from engine.grading import options as contract_options
from engine.grading.backends import ray_options

KNOWN_SANDBOXES = ("local", "docker", "modal", "daytona")
KNOWN_GRADING = ("local", "http", "harbor", "ray", "simulated")
KNOWN_AGENTS = ("terminus-2", "simulated")
DSLS = ("cute", "tirx")
DIRECTIONS = ("cute->tirx", "tirx->cute")


class ConfigError(ValueError):
    """The experiment file is invalid; the message names the file and the field."""


@dataclass(frozen=True)
class ModelConfig:
    name: str
    api_base: str | None = None
    api_key_env: str | None = None
    model_info: dict[str, Any] = field(default_factory=dict)
    scenario: str | None = None  # for the scripted stand-in model: a scenario file

    @property
    def label(self) -> str:
        return self.name


@dataclass(frozen=True)
class TransferEdge:
    kind: str  # cross_model | chain | edited_skill
    source_model: str | None = None
    target_model: str | None = None
    rounds: int = 1
    problem: str | None = None
    direction: str | None = None
    skill_file: str | None = None
    skill_text: str | None = None


@dataclass(frozen=True)
class Concurrency:
    sandboxes: int = 4
    attempts_per_model: int = 2
    grading_slots: int = 1
    llm_calls_per_model: int | None = None  # None: one call per running attempt at most


@dataclass(frozen=True)
class ExperimentConfig:
    name: str
    id: str
    models: tuple[ModelConfig, ...]
    problems: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    dsls: tuple[str, ...] = DSLS
    replicates: int = 1
    budget_minutes: float = 40.0
    max_submissions: int = 10
    agent: str = "terminus-2"
    agent_options: dict[str, Any] = field(default_factory=dict)
    sandbox: str = "local"
    sandbox_options: dict[str, Any] = field(default_factory=dict)
    unsafe_no_jail: bool = False  # local sandbox without the agent jail (recorded per attempt)
    grading: str = "local"
    grading_options: dict[str, Any] = field(default_factory=dict)
    gpu: str = "auto"  # [grading] gpu: b200 | h200 | h100 | auto (problems/targets.py)
    final_repeats: int = 1  # [grading] final_repeats: gradings of each passing final
    paired_repeats: int = 0  # [grading] paired_repeats: pairs per comparison (at most, adaptive)
    paired_adaptive: bool = False  # [grading] paired_repeats = "adaptive"
    concurrency: Concurrency = Concurrency()
    rerun_failed: bool = True
    max_tries: int = 3
    max_extra_minutes: float = 40.0  # [control]: what extends may add to one attempt, in all
    max_extra_submissions: int = 10
    transfers: tuple[TransferEdge, ...] = ()
    source_text: str = ""
    path: str = ""

    @property
    def budget_s(self) -> float:
        return self.budget_minutes * 60.0

    def model(self, name: str) -> ModelConfig:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)


def _safe_id(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "experiment"


def _expect(cond: bool, where: str, message: str) -> None:
    if not cond:
        raise ConfigError(f"{where}: {message}")


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    _expect(
        isinstance(value, list) and all(isinstance(v, str) and v for v in value),
        where,
        "must be a list of non-empty strings",
    )
    return tuple(value)


def _positive_int(value: Any, where: str) -> int:
    _expect(isinstance(value, int) and not isinstance(value, bool) and value >= 1, where,
            "must be a whole number ≥ 1")
    return int(value)


_TOP_KEYS = {
    "experiment", "models", "concurrency", "retry", "transfers", "sandbox", "grading", "agent",
    "control",
}
_EXPERIMENT_KEYS = {
    "name", "id", "problems", "families", "dsls", "replicates", "budget_minutes",
    "max_submissions", "sandbox", "grading", "agent", "unsafe_no_jail",
}
_MODEL_KEYS = {"name", "api_base", "api_key_env", "model_info", "scenario"}


def parse_config(text: str, path: str = "<config>", *, check_problems: bool = True) -> (
    ExperimentConfig
):
    """Parse and validate an experiment TOML text."""
    data, exp = _load_sections(text, path)
    name, exp_id = _parse_identity(exp, path)
    models = _parse_models(data.get("models"), path)
    scope = _parse_scope(exp, path)
    runtime = _parse_runtime(exp, data, path)
    concurrency = _parse_concurrency(data.get("concurrency", {}), path)
    rerun_failed, max_tries = _parse_retry(data.get("retry", {}), path)
    control = _parse_control(data.get("control", {}), scope, path)
    names = [m.name for m in models]
    transfers = tuple(
        _parse_transfer(t, f"{path} [[transfers]] #{i + 1}", names, Path(path).parent)
        for i, t in enumerate(data.get("transfers", []))
    )
    config = ExperimentConfig(
        name=name,
        id=exp_id,
        models=models,
        **scope,
        **runtime,
        concurrency=concurrency,
        rerun_failed=rerun_failed,
        max_tries=max_tries,
        **control,
        transfers=transfers,
        source_text=text,
        path=path,
    )
    if check_problems:
        validate_problems(config)
    return config


def _load_sections(text: str, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parsed TOML and its ``[experiment]`` table, with no unknown sections or keys."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    unknown = set(data) - _TOP_KEYS
    _expect(not unknown, path, f"unknown sections {sorted(unknown)}")
    exp: Any = data.get("experiment")
    _expect(isinstance(exp, dict), path, "missing [experiment] section")
    unknown = set(exp) - _EXPERIMENT_KEYS
    _expect(not unknown, f"{path} [experiment]", f"unknown keys {sorted(unknown)}")
    return data, exp


def _parse_identity(exp: dict[str, Any], path: str) -> tuple[str, str]:
    """The experiment's name and id (the id defaults to the name made safe)."""
    name: Any = exp.get("name")
    _expect(isinstance(name, str) and name.strip() != "", f"{path} [experiment].name",
            "is required")
    exp_id = exp.get("id", _safe_id(name))
    _expect(isinstance(exp_id, str) and re.fullmatch(r"[A-Za-z0-9_.-]+", exp_id) is not None,
            f"{path} [experiment].id", "may use letters, digits, '.', '_' and '-' only")
    return name, exp_id


def _parse_models(raw_models: Any, path: str) -> tuple[ModelConfig, ...]:
    """The ``[[models]]`` entries: at least one, each named, names distinct."""
    _expect(isinstance(raw_models, list) and len(raw_models) > 0, path,
            "at least one [[models]] entry is required")
    models: list[ModelConfig] = []
    for i, m in enumerate(raw_models):
        where = f"{path} [[models]] #{i + 1}"
        _expect(isinstance(m, dict), where, "must be a table")
        unknown = set(m) - _MODEL_KEYS
        _expect(not unknown, where, f"unknown keys {sorted(unknown)}")
        _expect(isinstance(m.get("name"), str) and m["name"].strip() != "", where,
                "name (a litellm model name) is required")
        info = m.get("model_info", {})
        _expect(isinstance(info, dict), where, "model_info must be a table")
        models.append(
            ModelConfig(
                name=m["name"],
                api_base=m.get("api_base"),
                api_key_env=m.get("api_key_env"),
                model_info=dict(info),
                scenario=m.get("scenario"),
            )
        )
    names = [m.name for m in models]
    _expect(len(set(names)) == len(names), path, "model names must be distinct")
    return tuple(models)


def _parse_scope(exp: dict[str, Any], path: str) -> dict[str, Any]:
    """What the experiment covers and how much each attempt gets: DSLs, problems, families,
    replicates, budget and submissions (as :class:`ExperimentConfig` keyword arguments)."""
    dsls = _str_list(exp.get("dsls", list(DSLS)), f"{path} [experiment].dsls")
    bad = set(dsls) - set(DSLS)
    _expect(not bad, f"{path} [experiment].dsls", f"unknown DSLs {sorted(bad)}; use cute, tirx")
    problems = _str_list(exp.get("problems", []), f"{path} [experiment].problems") if (
        "problems" in exp
    ) else ()
    families = _str_list(exp.get("families", []), f"{path} [experiment].families") if (
        "families" in exp
    ) else ()
    replicates = _positive_int(exp.get("replicates", 1), f"{path} [experiment].replicates")
    budget = exp.get("budget_minutes", 40)
    _expect(isinstance(budget, (int, float)) and not isinstance(budget, bool) and budget > 0,
            f"{path} [experiment].budget_minutes", "must be a positive number")
    max_subs = exp.get("max_submissions", 10)
    _expect(isinstance(max_subs, int) and not isinstance(max_subs, bool) and max_subs >= 0,
            f"{path} [experiment].max_submissions", "must be a whole number ≥ 0")
    return {
        "problems": problems,
        "families": families,
        "dsls": dsls,
        "replicates": replicates,
        "budget_minutes": float(budget),
        "max_submissions": int(max_subs),
    }


def _parse_runtime(exp: dict[str, Any], data: dict[str, Any], path: str) -> dict[str, Any]:
    """Where and how attempts run: sandbox, grading and agent with their option tables (as
    :class:`ExperimentConfig` keyword arguments)."""
    sandbox = exp.get("sandbox", "local")
    _expect(isinstance(sandbox, str) and (sandbox in KNOWN_SANDBOXES or ":" in sandbox),
            f"{path} [experiment].sandbox",
            f"must be one of {KNOWN_SANDBOXES} or an import path 'module:Class'")
    grading = exp.get("grading", "local")
    _expect(grading in KNOWN_GRADING, f"{path} [experiment].grading",
            f"must be one of {KNOWN_GRADING}")
    sandbox_options = data.get("sandbox", {})
    unsafe_no_jail = exp.get("unsafe_no_jail", False)
    _expect(isinstance(unsafe_no_jail, bool), f"{path} [experiment].unsafe_no_jail",
            "must be true/false")
    _expect(not unsafe_no_jail or sandbox == "local", f"{path} [experiment].unsafe_no_jail",
            'applies to sandbox = "local" only (other sandboxes bring their own isolation)')
    agent = exp.get("agent", "terminus-2")
    _expect(agent in KNOWN_AGENTS, f"{path} [experiment].agent",
            f"must be one of {KNOWN_AGENTS} (simulated is for engine tests and benchmarks)")
    agent_options = data.get("agent", {})
    _expect(isinstance(agent_options, dict), f"{path} [agent]", "must be a table")
    grading_options = data.get("grading", {})
    _expect(isinstance(sandbox_options, dict), f"{path} [sandbox]", "must be a table")
    _expect(isinstance(grading_options, dict), f"{path} [grading]", "must be a table")
    # options of the grading contract itself (EvalConfig); an http grader takes its own
    contract_options.check_config(grading_options, grading, f"{path} [grading]", _expect)
    grading_table.check_keys(grading_options, grading, f"{path} [grading]", _expect,
                             contract_options.config_keys())
    if grading == "ray":  # [grading.ray]; Ray itself must be installed
        ray_options.check_table(grading_options.get("ray"), f"{path} [grading.ray]", _expect)
    paired, adaptive = grading_table.paired_repeats(grading_options, f"{path} [grading]", _expect)
    return {
        "agent": agent,
        "agent_options": dict(agent_options),
        "sandbox": sandbox,
        "sandbox_options": dict(sandbox_options),
        "unsafe_no_jail": unsafe_no_jail,
        "grading": grading,
        "grading_options": {
            k: v for k, v in grading_options.items() if k not in grading_table.ENGINE_KEYS
        },
        "final_repeats": grading_table.final_repeats(grading_options, f"{path} [grading]", _expect),
        "paired_repeats": paired,
        "paired_adaptive": adaptive,
        "gpu": _parse_gpu(grading_options, grading, path),
    }


def _parse_gpu(grading_options: dict[str, Any], grading: str, path: str) -> str:
    """``[grading] gpu``: the grading GPU (``auto``: what the grading host reports)."""
    from problems.targets import GPU_SETTINGS

    gpu = grading_options.get("gpu", "auto")
    where = f"{path} [grading].gpu"
    _expect(gpu in GPU_SETTINGS, where, f"must be one of {', '.join(GPU_SETTINGS)}")
    _expect(gpu != "auto" or grading != "harbor", where,
            "harbor grading cannot report its GPU before the first evaluation: name it "
            '(gpu = "b200", "h200" or "h100")')
    return str(gpu)


def _parse_concurrency(conc: Any, path: str) -> Concurrency:
    """The ``[concurrency]`` table (every limit a whole number ≥ 1)."""
    _expect(isinstance(conc, dict), f"{path} [concurrency]", "must be a table")
    unknown = set(conc) - {"sandboxes", "attempts_per_model", "grading_slots",
                           "llm_calls_per_model"}
    _expect(not unknown, f"{path} [concurrency]", f"unknown keys {sorted(unknown)}")
    return Concurrency(
        sandboxes=_positive_int(conc.get("sandboxes", 4), f"{path} [concurrency].sandboxes"),
        attempts_per_model=_positive_int(
            conc.get("attempts_per_model", 2), f"{path} [concurrency].attempts_per_model"
        ),
        grading_slots=_positive_int(
            conc.get("grading_slots", 1), f"{path} [concurrency].grading_slots"
        ),
        llm_calls_per_model=None if conc.get("llm_calls_per_model") is None else _positive_int(
            conc["llm_calls_per_model"], f"{path} [concurrency].llm_calls_per_model"
        ),
    )


def _parse_retry(retry: Any, path: str) -> tuple[bool, int]:
    """The ``[retry]`` table: whether failed attempts rerun, and how many tries at most."""
    _expect(isinstance(retry, dict), f"{path} [retry]", "must be a table")
    rerun_failed = retry.get("rerun_failed", True)
    _expect(isinstance(rerun_failed, bool), f"{path} [retry].rerun_failed", "must be true/false")
    max_tries = _positive_int(retry.get("max_tries", 3), f"{path} [retry].max_tries")
    return rerun_failed, max_tries


def _parse_control(table: Any, scope: dict[str, Any], path: str) -> dict[str, Any]:
    """The ``[control]`` table: the most ``mkb attempt extend`` may add to one attempt."""
    _expect(isinstance(table, dict), f"{path} [control]", "must be a table")
    unknown = set(table) - {"max_extra_minutes", "max_extra_submissions"}
    _expect(not unknown, f"{path} [control]", f"unknown keys {sorted(unknown)}")
    minutes = table.get("max_extra_minutes", scope["budget_minutes"])
    _expect(isinstance(minutes, (int, float)) and not isinstance(minutes, bool)
            and minutes >= 0, f"{path} [control].max_extra_minutes", "must be a number ≥ 0")
    submissions = table.get("max_extra_submissions", scope["max_submissions"])
    _expect(isinstance(submissions, int) and not isinstance(submissions, bool)
            and submissions >= 0, f"{path} [control].max_extra_submissions",
            "must be a whole number ≥ 0")
    return {"max_extra_minutes": float(minutes), "max_extra_submissions": submissions}


def _parse_transfer(raw: Any, where: str, models: list[str], base: Path) -> TransferEdge:
    _expect(isinstance(raw, dict), where, "must be a table")
    kind = raw.get("kind")
    _expect(kind in ("cross_model", "chain", "edited_skill"), where,
            "kind must be cross_model, chain or edited_skill")
    if kind == "cross_model":
        for key in ("source_model", "target_model"):
            _expect(raw.get(key) in models, where, f"{key} must name a model in [[models]]")
        _expect(raw["source_model"] != raw["target_model"], where,
                "source_model and target_model must differ")
        return TransferEdge(kind, source_model=raw["source_model"],
                            target_model=raw["target_model"])
    if kind == "chain":
        rounds = _positive_int(raw.get("rounds", 2), f"{where}.rounds")
        _expect(rounds >= 2, f"{where}.rounds", "a chain needs at least 2 rounds")
        return TransferEdge(kind, rounds=rounds)
    _expect(isinstance(raw.get("problem"), str), where, "problem is required")
    _expect(raw.get("direction") in DIRECTIONS, where, f"direction must be one of {DIRECTIONS}")
    model = raw.get("model", models[0])
    _expect(model in models, where, "model must name a model in [[models]]")
    text = raw.get("skill_text")
    file = raw.get("skill_file")
    _expect((text is None) != (file is None), where, "give exactly one of skill_file, skill_text")
    if file is not None:
        p = (base / file) if not Path(file).is_absolute() else Path(file)
        _expect(p.is_file(), where, f"skill_file {file!r} not found")
        text = p.read_text(encoding="utf-8")
    _expect(isinstance(text, str) and text.strip() != "", where, "the edited skill is blank")
    return TransferEdge(kind, target_model=model, problem=raw["problem"],
                        direction=raw["direction"], skill_file=file, skill_text=text)


def validate_problems(config: ExperimentConfig) -> None:
    """Every problem and transfer edge of the config names a catalog problem."""
    from problems.registry import catalog

    cat = catalog()
    try:
        chosen = select_problems(config)
    except KeyError as exc:
        raise ConfigError(f"{config.path} [experiment].problems: {exc.args[0]}") from exc
    _expect(len(chosen) > 0, config.path, "no problem matches the problems/families selection")
    for edge in config.transfers:
        if edge.problem is not None:
            try:
                cat.get(edge.problem)
            except KeyError as exc:
                raise ConfigError(f"{config.path} [[transfers]]: {exc.args[0]}") from exc


def select_problems(config: ExperimentConfig) -> list[str]:
    """The problem ids an experiment covers (ids, slugs or globs, then family filters)."""
    from problems.registry import catalog

    cat = catalog()
    chosen = cat.select(config.problems or None)
    if config.families:
        fams = {p.id for fam in config.families for p in cat.select(None, family=fam)}
        chosen = [p for p in chosen if p.id in fams]
    return [p.id for p in chosen]


def load_config(path: str | Path, *, check_problems: bool = True) -> ExperimentConfig:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from exc
    return parse_config(text, str(p), check_problems=check_problems)
