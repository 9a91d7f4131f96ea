"""Fixtures for the jail tests (helpers live in jail_support.py, imported by name)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jail_support import EnvFactory, make_env  # noqa: E402

from engine.sandbox.local_ns import LocalNamespaceEnvironment  # noqa: E402


@pytest.fixture
async def started(tmp_path: Path) -> AsyncIterator[EnvFactory]:
    """Start sandboxes (``started(name, **kwargs)``); every one is stopped afterwards."""
    envs: list[LocalNamespaceEnvironment] = []

    async def start(name: str = "a", **kwargs: Any) -> LocalNamespaceEnvironment:
        env = make_env(tmp_path, name, **kwargs)
        envs.append(env)
        await env.start(force_build=False)
        return env

    yield start
    for env in envs:
        await env.stop(delete=True)
