"""The per-model limit on model calls in flight (``[concurrency].llm_calls_per_model``)."""

from __future__ import annotations

import asyncio

import pytest
from harbor.agents.terminus_2.terminus_2 import Terminus2

from engine.attempts import agent
from engine.attempts.agent import ObservedTerminus2, set_llm_limit
from engine.config import ConfigError, parse_config
from engine.factory import Terminus2Runner

CONFIG = """
[experiment]
name = "limits"
problems = ["p28"]

[[models]]
name = "scripted/a"

[concurrency]
attempts_per_model = 4
"""


def _agent(limit_key: str | None) -> ObservedTerminus2:
    """An agent object without a sandbox or model: only what the call path touches."""
    bare = ObservedTerminus2.__new__(ObservedTerminus2)
    bare._channel, bare._llm_limit = None, limit_key
    bare._trajectory_steps, bare._emitted_steps = [], 0
    return bare


@pytest.fixture
def slow_model(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    seen = {"now": 0, "peak": 0}

    async def call(self, *args, **kwargs):
        seen["now"] += 1
        seen["peak"] = max(seen["peak"], seen["now"])
        await asyncio.sleep(0.02)
        seen["now"] -= 1
        return "reply"

    monkeypatch.setattr(Terminus2, "_handle_llm_interaction", call)
    return seen


async def test_calls_of_one_model_share_the_limit(slow_model: dict[str, int]) -> None:
    set_llm_limit("scripted/a", 2)
    try:
        replies = await asyncio.gather(
            *(_agent("scripted/a")._handle_llm_interaction() for _ in range(6))
        )
    finally:
        set_llm_limit("scripted/a", None)
    assert replies == ["reply"] * 6 and slow_model["peak"] == 2


async def test_without_a_limit_calls_are_not_held(slow_model: dict[str, int]) -> None:
    await asyncio.gather(*(_agent(None)._handle_llm_interaction() for _ in range(4)))
    assert slow_model["peak"] == 4


def test_config_sets_the_limit_for_every_model() -> None:
    config = parse_config(CONFIG + "llm_calls_per_model = 1\n")
    assert config.concurrency.llm_calls_per_model == 1
    Terminus2Runner(config)
    try:
        assert agent._LLM_LIMITS["scripted/a"]._value == 1
    finally:
        set_llm_limit("scripted/a", None)
    assert parse_config(CONFIG).concurrency.llm_calls_per_model is None
    with pytest.raises(ConfigError, match="llm_calls_per_model"):
        parse_config(CONFIG + "llm_calls_per_model = 0\n")
    with pytest.raises(ValueError):
        set_llm_limit("x", 0)


def test_harbor_builds_the_agent_with_the_limit_key(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    built = ObservedTerminus2(logs_dir=tmp_path, model_name="openai/x", llm_limit="scripted/a",
                              api_base="http://127.0.0.1:9")
    assert built._llm_limit == "scripted/a"
