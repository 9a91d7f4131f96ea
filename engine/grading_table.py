"""The keys an experiment's ``[grading]`` table may hold, and their check.

The table mixes three kinds of keys: the engine's own (``final_repeats``, ``paired_repeats``,
``paired_max``; ``gpu``), the
grading contract's options (``engine.grading.options``: ``kernel_audit``, ``warm_calls``) and
the chosen backend's constructor options. Any other key — a typo such as ``final_repeat``, or
a key of another backend — is rejected naming it, with the closest known key when one is near.
The backend lists mirror the constructors (``tests/engine/test_grading_config.py`` checks them
against the signatures; this module cannot import the stand-ins to read them itself).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any

from engine.grading.options import CONFIG_BACKENDS

ENGINE_KEYS = ("final_repeats", "paired_repeats", "paired_max", "gpu")
MAX_FINAL_REPEATS = 20
MAX_PAIRED = 50  # pairs per comparison, fixed or adaptive
DEFAULT_PAIRED_MAX = 10
BACKEND_KEYS: dict[str, tuple[str, ...]] = {
    # engine.grading.backends.local.LocalBackend (config comes from the contract options)
    "local": (
        "gpus",
        "preview_slots",
        "warm",
        "preload_dsls",
        "cpu_placement",
        "preview_ahead",
    ),
    # engine.grading.backends.fleet.FleetBackend and the HttpBackend it extends
    "http": (
        "urls",
        "token",
        "tries",
        "timeout_s",
        "connect_timeout_s",
        "backoff_s",
        "cooldown_s",
        "max_cooldown_s",
    ),
    # engine.grading.backends.harbor.HarborConfig
    "harbor": (
        "docker_image",
        "environment_type",
        "import_path",
        "gpus",
        "gpu_types",
        "memory_mb",
        "remote_root",
        "python",
        "env_kwargs",
        "concurrency",
    ),
    # engine.grading.backends.ray: its options are the [grading.ray] table (ray_options.py)
    "ray": ("ray",),
    # engine.standins.simulated.SimulatedBackend
    "simulated": (
        "delay_s",
        "preview",
        "noise_cv",
        "seed",
        "call_log",
        "slots",
        "hosts",
        "host_speed",
        "host_noise",
        "dsl_cv",
        "outlier_rate",
        "outlier_factor",
        "scatter",
    ),
}
# nested tables whose keys are checked too (a table of problem ids)
_PROBLEM_KEY = re.compile(r"^p\d\d$")

Expect = Callable[[bool, str, str], None]


def allowed_keys(grading: str, contract_keys: tuple[str, ...]) -> tuple[str, ...]:
    """Every key ``[grading]`` may hold for this backend."""
    contract = contract_keys if grading in CONFIG_BACKENDS else ()
    return (*ENGINE_KEYS, *contract, *BACKEND_KEYS.get(grading, ()))


def _did_you_mean(key: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_keys(
    options: Mapping[str, Any],
    grading: str,
    where: str,
    expect: Expect,
    contract_keys: tuple[str, ...],
) -> None:
    """Reject unknown ``[grading]`` keys (and unknown keys of its nested tables)."""
    allowed = allowed_keys(grading, contract_keys)
    for key in options:
        if key in allowed:
            continue
        owners = [name for name, keys in BACKEND_KEYS.items() if key in keys]
        hint = (
            f" (a key of {' and '.join(owners)} grading)" if owners else _did_you_mean(key, allowed)
        )
        expect(
            False,
            f"{where}.{key}",
            f"unknown key for {grading} grading{hint}; known: " + ", ".join(sorted(allowed)),
        )
    _check_simulated_hosts(options, where, expect)
    noise = options.get("noise_cv")
    if noise is not None:
        expect(
            isinstance(noise, dict),
            f"{where}.noise_cv",
            "must be a table of problem id = CV, e.g. { p28 = 0.03 }",
        )
        for key, value in noise.items():
            at = f"{where}.noise_cv.{key}"
            expect(
                bool(_PROBLEM_KEY.match(key)) or key == "default",
                at,
                "unknown key: use a problem id such as p28, or default",
            )
            expect(
                isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1,
                at,
                "must be a coefficient of variation in [0, 1)",
            )


def final_repeats(options: Mapping[str, Any], where: str, expect: Expect) -> int:
    """``[grading] final_repeats``: gradings of each final implementation (default 1)."""
    value = options.get("final_repeats", 1)
    expect(
        isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_FINAL_REPEATS,
        f"{where}.final_repeats",
        f"must be a whole number from 1 to {MAX_FINAL_REPEATS}",
    )
    return int(value)


def paired_repeats(options: Mapping[str, Any], where: str, expect: Expect) -> tuple[int, bool]:
    """``[grading] paired_repeats`` (0: none; k: k pairs; ``"adaptive"``: until the
    sequential test decides) and ``paired_max`` (the adaptive maximum, default 10): the pairs
    each comparison's paired job grades at most, and whether it may stop early."""
    value = options.get("paired_repeats", 0)
    adaptive = value == "adaptive"
    expect(
        adaptive
        or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_PAIRED),
        f"{where}.paired_repeats",
        f'must be a whole number from 0 to {MAX_PAIRED} or "adaptive"',
    )
    most = options.get("paired_max", DEFAULT_PAIRED_MAX)
    expect(
        isinstance(most, int) and not isinstance(most, bool) and 2 <= most <= MAX_PAIRED,
        f"{where}.paired_max",
        f"must be a whole number from 2 to {MAX_PAIRED}",
    )
    expect(
        adaptive or "paired_max" not in options,
        f"{where}.paired_max",
        'applies only with paired_repeats = "adaptive"',
    )
    return (int(most) if adaptive else int(value)), adaptive


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_simulated_hosts(options: Mapping[str, Any], where: str, expect: Expect) -> None:
    """The simulated grader's hosts, their speed and noise, DSL noise and outliers."""
    hosts = options.get("hosts", [])
    expect(
        isinstance(hosts, list) and all(isinstance(h, str) and h for h in hosts),
        f"{where}.hosts",
        'must be a list of host names, e.g. ["host0", "host1"]',
    )
    for key, ok, what in (
        ("host_speed", lambda v: _number(v) and v > 0, "a runtime factor above 0"),
        ("host_noise", lambda v: _number(v) and v >= 0, "a factor on the CV, 0 or more"),
        ("dsl_cv", lambda v: _number(v) and 0 <= v < 1, "a coefficient of variation in [0, 1)"),
    ):
        table = options.get(key, {})
        expect(isinstance(table, dict), f"{where}.{key}", "must be a table, e.g. { host1 = 1.1 }")
        for name, value in table.items() if isinstance(table, dict) else ():
            expect(ok(value), f"{where}.{key}.{name}", f"must be {what}")
    rate = options.get("outlier_rate", 0.0)
    expect(_number(rate) and 0 <= rate <= 1, f"{where}.outlier_rate", "must be in [0, 1]")
    factor = options.get("outlier_factor", 2.0)
    expect(_number(factor) and factor > 0, f"{where}.outlier_factor", "must be above 0")
    expect(
        isinstance(options.get("scatter", False), bool), f"{where}.scatter", "must be true or false"
    )
