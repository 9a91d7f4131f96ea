"""``[grading.ray]``: the Ray backend's options, their check and the install hint.

Nothing here imports Ray: the experiment's config is checked (and ``grading = "ray"`` refused
with the install command when Ray is missing) before anything connects.

```toml
[experiment]
grading = "ray"

[grading.ray]
address = "auto"                  # auto | local | HOST:PORT | ray://HOST:PORT
resources = { H200 = 1 }          # optional: a custom resource each grader needs
graders_per_gpu = 1               # >1 shares a GPU (its timings are then not exclusive)
# graders = 8                     # optional cap on the graders started
token_env = "RAY_AUTH_TOKEN"      # the variable that holds the cluster's auth token
```
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

INSTALL_HINT = "install the ray extra: pip install -e '.[ray]' (it pins ray==2.60.0)"
GRADERS = ("local", "simulated")  # simulated: a stand-in the factory picks (tests, benchmarks)
_ADDRESS = re.compile(r"^(auto|local|(ray://)?[A-Za-z0-9_.:\[\]-]+:\d{1,5})$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]*$")

Expect = Callable[[bool, str, str], None]


@dataclass(frozen=True)
class RayOptions:
    """Where the cluster is and how graders are placed (the engine's side of the backend)."""

    address: str = "auto"  # auto (this host's cluster), local, HOST:PORT, ray://HOST:PORT
    resources: dict[str, float] = field(default_factory=dict)  # e.g. {"H200": 1} per grader
    graders_per_gpu: int = 1  # >1 shares a GPU: its timings are then not exclusive
    graders: int | None = None  # at most this many graders (default: every GPU's worth)
    token_env: str = "RAY_AUTH_TOKEN"  # the variable holding the cluster's auth token
    namespace: str = "mkb-grading"
    heartbeat_s: float = 2.0  # how often a lane pings its busy actor
    lost_after_s: float = 10.0  # an actor that does not answer a ping this long is lost
    max_dispatches: int = 3  # hand-outs of one job before it ends as an infrastructure error
    # jobs a grader holds at once: one grades, the others wait at the grader (as at an http
    # grading service); 1 keeps every waiting job in the engine's queue for the first free one
    pipeline: int = 1
    warm_timeout_s: float = 900.0  # a (re)started actor's warm parent must be ready by then


# [grading.ray] keys: the RayOptions fields, the grader and the simulated grader's seconds
TABLE_KEYS = (
    *(name for name in RayOptions.__dataclass_fields__ if name not in ("namespace",)),
    "grader",
    "simulated_s",
)


def ray_installed() -> bool:
    """Whether Ray can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_table(table: Any, where: str, expect: Expect) -> None:
    """Check ``[grading.ray]`` (``where`` names it in messages); Ray must be installed."""
    expect(
        ray_installed(), where, f'grading = "ray" needs Ray, which is not installed: {INSTALL_HINT}'
    )
    table = {} if table is None else table
    expect(isinstance(table, dict), where, "must be a table")
    unknown = sorted(set(table) - set(TABLE_KEYS))
    expect(not unknown, where, f"unknown keys {unknown}; known: {', '.join(sorted(TABLE_KEYS))}")
    address = table.get("address", "auto")
    expect(
        isinstance(address, str) and bool(_ADDRESS.match(address)),
        f"{where}.address",
        'must be "auto", "local", "HOST:PORT" or "ray://HOST:PORT"',
    )
    resources = table.get("resources", {})
    expect(isinstance(resources, dict), f"{where}.resources", "must be a table, e.g. { H200 = 1 }")
    for name, amount in resources.items():
        expect(
            bool(_NAME.match(name)) and _number(amount) and amount > 0,
            f"{where}.resources.{name}",
            "must be a positive amount of a named resource",
        )
    for key in ("graders_per_gpu", "graders", "max_dispatches", "pipeline"):
        if key in table:
            expect(_whole(table[key]), f"{where}.{key}", "must be a whole number ≥ 1")
    for key in ("heartbeat_s", "lost_after_s", "warm_timeout_s"):
        if key in table:
            expect(
                _number(table[key]) and table[key] > 0,
                f"{where}.{key}",
                "must be a positive number of seconds",
            )
    token_env = table.get("token_env", "RAY_AUTH_TOKEN")
    expect(
        isinstance(token_env, str) and bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token_env)),
        f"{where}.token_env",
        "must name an environment variable",
    )
    grader = table.get("grader", "local")
    expect(
        grader in GRADERS,
        f"{where}.grader",
        f"must be one of {GRADERS} (simulated is for tests and benchmarks)",
    )
    if "simulated_s" in table:
        span = table["simulated_s"]
        expect(grader == "simulated", f"{where}.simulated_s", 'applies to grader = "simulated"')
        expect(
            isinstance(span, list)
            and len(span) == 2
            and all(_number(v) for v in span)
            and 0 <= span[0] <= span[1],
            f"{where}.simulated_s",
            "must be [min, max] seconds with 0 ≤ min ≤ max",
        )


def from_table(table: Mapping[str, Any] | None) -> tuple[RayOptions, str, tuple[float, float]]:
    """A checked ``[grading.ray]`` as (options, grader, simulated seconds)."""
    values = dict(table or {})
    grader = str(values.pop("grader", "local"))
    low, high = values.pop("simulated_s", (0.1, 0.5))
    if "resources" in values:
        values["resources"] = {k: float(v) for k, v in values["resources"].items()}
    return RayOptions(**values), grader, (float(low), float(high))
