"""Terminus-2 with per-turn callbacks: every trajectory step is streamed as it is recorded.

Harbor builds agents from an import path and JSON-able kwargs, so the live observer is found
through a process-wide registry: :func:`register_channel` maps a channel name (the attempt's
try id) to an async sink, and the agent's ``channel`` kwarg names it. Likewise
:func:`set_llm_limit` bounds the model calls in flight per key (the engine uses the model
name), and the agent's ``llm_limit`` kwarg names the key: attempts of one model then share
that many concurrent calls while their other turns (commands, feedback waits) overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from harbor.agents.terminus_2.terminus_2 import Terminus2, Terminus2Options
from pydantic import Field

StepSink = Callable[[dict[str, Any]], Awaitable[None]]
_CHANNELS: dict[str, StepSink] = {}
_LLM_LIMITS: dict[str, asyncio.Semaphore] = {}


def register_channel(name: str, sink: StepSink) -> None:
    """Route the steps of agents created with ``channel=name`` to ``sink``."""
    _CHANNELS[name] = sink


def unregister_channel(name: str) -> None:
    _CHANNELS.pop(name, None)


def set_llm_limit(key: str, calls: int | None) -> None:
    """Allow ``calls`` model calls in flight for agents created with ``llm_limit=key``
    (``None`` removes the limit)."""
    if calls is None:
        _LLM_LIMITS.pop(key, None)
    elif calls < 1:
        raise ValueError("an LLM call limit must be at least 1")
    else:
        _LLM_LIMITS[key] = asyncio.Semaphore(calls)


class ObservedTerminus2Options(Terminus2Options):
    channel: str | None = Field(default=None, description="Step sink registered in-process.")
    llm_limit: str | None = Field(
        default=None, description="Key of a per-model limit on model calls in flight."
    )
    record_terminal_session: bool = Field(
        default=False, description="Asciinema capture (off: it would install tools on hosts)."
    )


class ObservedTerminus2(Terminus2):
    """Terminus-2 that hands each new ATIF step to a registered sink before the next turn."""

    options_model = ObservedTerminus2Options

    def __init__(
        self, *args: Any, channel: str | None = None, llm_limit: str | None = None, **kwargs: Any
    ) -> None:
        kwargs.setdefault("record_terminal_session", False)
        super().__init__(*args, channel=channel, llm_limit=llm_limit, **kwargs)
        self._channel = channel
        self._llm_limit = llm_limit
        self._emitted_steps = 0

    @staticmethod
    def name() -> str:
        return "mkb-terminus-2"

    async def _flush_steps(self) -> None:
        sink = _CHANNELS.get(self._channel or "")
        steps = self._trajectory_steps
        if len(steps) < self._emitted_steps:  # a linear-history split restarted the list
            self._emitted_steps = 0
        pending = steps[self._emitted_steps :]
        self._emitted_steps = len(steps)
        if sink is None:
            return
        for step in pending:
            await sink(step.model_dump(mode="json", exclude_none=True))

    async def _handle_llm_interaction(self, *args: Any, **kwargs: Any):  # type: ignore[override]
        await self._flush_steps()
        async with _LLM_LIMITS.get(self._llm_limit or "") or contextlib.nullcontext():
            return await super()._handle_llm_interaction(*args, **kwargs)

    async def run(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        try:
            await super().run(*args, **kwargs)
        finally:
            await self._flush_steps()
