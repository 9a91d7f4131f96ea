"""Shared helpers for the jail tests (imported by name, not via conftest): real local
sandboxes started through Harbor's environment API.

Tests skip only where the local sandbox cannot run at all (not Linux, not root); on such a
host without bubblewrap they fail, as attempts would.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HARBOR_TELEMETRY", "0")

from harbor.models.task.config import EnvironmentConfig as TaskEnvironment  # noqa: E402
from harbor.models.trial.paths import TrialPaths  # noqa: E402

from engine.sandbox.local_ns import (  # noqa: E402
    LocalNamespaceEnvironment,
    namespace_support_problem,
)

needs_root_linux = pytest.mark.skipif(
    namespace_support_problem() is not None,
    reason=f"local sandbox unavailable: {namespace_support_problem()}",
)

EnvFactory = Callable[..., Awaitable[LocalNamespaceEnvironment]]


def make_env(
    folder: Path, name: str = "a", network_mode: str = "no-network", **kwargs: Any
) -> LocalNamespaceEnvironment:
    """A local sandbox over ``folder`` whose workspace starts with ``hello.txt``."""
    env_dir = folder / f"environment-{name}"
    env_dir.mkdir(parents=True, exist_ok=True)
    (env_dir / "hello.txt").write_text("from the task\n")
    paths = TrialPaths(folder / f"trial-{name}")
    paths.mkdir()
    return LocalNamespaceEnvironment(
        environment_dir=env_dir,
        environment_name=name,
        session_id=f"jail-test-{os.getpid()}-{name}__env",
        trial_paths=paths,
        task_env_config=TaskEnvironment(
            workdir="/workspace", network_mode=network_mode, cpus=1, memory_mb=2048
        ),
        root_dir=str(folder / "sandboxes"),
        **kwargs,
    )
