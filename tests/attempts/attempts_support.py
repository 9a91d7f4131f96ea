"""Shared constants and markers for the attempt tests (imported by name, not via conftest)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HARBOR_TELEMETRY", "0")

from engine.sandbox.local_ns import namespace_support_problem  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MODEL_INFO = {
    "max_input_tokens": 200_000,
    "max_output_tokens": 8_000,
    "input_cost_per_token": 0.0,
    "output_cost_per_token": 0.0,
}

needs_namespaces = pytest.mark.skipif(
    namespace_support_problem() is not None,
    reason=f"local namespace sandbox unavailable: {namespace_support_problem()}",
)
