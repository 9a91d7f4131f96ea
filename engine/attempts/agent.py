"""Terminus-2 with per-turn callbacks: every trajectory step is streamed as it is recorded.

Harbor builds agents from an import path and JSON-able kwargs, so the live observer is found
through a process-wide registry: :func:`register_channel` maps a channel name (the attempt's
try id) to an async sink, and the agent's ``channel`` kwarg names it. Likewise
:func:`set_llm_limit` bounds the model calls in flight per key (the engine uses the model
name), and the agent's ``llm_limit`` kwarg names the key: attempts of one model then share
that many concurrent calls while their other turns (commands, feedback waits) overlap.

A channel may also take the model's reply as it streams (``register_channel(..., reply=)``):
the agent then calls its model through :class:`~engine.attempts.live_llm.StreamingLiteLLM`,
which reports the growing text (throttled) before the finished turn arrives as a step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from harbor.agents.terminus_2.terminus_2 import Terminus2, Terminus2Options
from harbor.llms.base import BaseLLM, LLMBackend
from harbor.llms.litellm_config import configure_litellm_debug
from pydantic import Field

from engine.attempts.live_llm import StreamingLiteLLM
from engine.attempts.observer import ReplyDelta

StepSink = Callable[[dict[str, Any]], Awaitable[None]]
ReplySink = Callable[[ReplyDelta], Awaitable[None]]
_CHANNELS: dict[str, StepSink] = {}
_REPLIES: dict[str, ReplySink] = {}
_LLM_LIMITS: dict[str, asyncio.Semaphore] = {}


def register_channel(name: str, sink: StepSink, reply: ReplySink | None = None) -> None:
    """Route the steps of agents created with ``channel=name`` to ``sink`` (and their model
    replies, as they stream, to ``reply``)."""
    _CHANNELS[name] = sink
    if reply is not None:
        _REPLIES[name] = reply


def unregister_channel(name: str) -> None:
    _CHANNELS.pop(name, None)
    _REPLIES.pop(name, None)


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
        self._channel = channel  # before Terminus-2 builds its model (``_init_llm``)
        super().__init__(*args, channel=channel, llm_limit=llm_limit, **kwargs)
        self._llm_limit = llm_limit
        self._emitted_steps = 0

    @staticmethod
    def name() -> str:
        return "mkb-terminus-2"

    def _init_llm(  # type: ignore[override]
        self,
        llm_backend: LLMBackend | str,
        model_name: str,
        temperature: float | None,
        collect_rollout_details: bool,
        llm_kwargs: dict[str, Any] | None,
        **litellm_args: Any,
    ) -> BaseLLM:
        """Harbor's model, except that a channel taking replies gets them streamed."""
        backend = llm_backend.value if isinstance(llm_backend, LLMBackend) else llm_backend
        if backend != LLMBackend.LITELLM.value or self._channel not in _REPLIES:
            return super()._init_llm(  # type: ignore[no-any-return]
                llm_backend,
                model_name,
                temperature,
                collect_rollout_details,
                llm_kwargs,
                **litellm_args,
            )
        kwargs = dict(llm_kwargs or {})
        if temperature is not None:
            kwargs["temperature"] = temperature
        configure_litellm_debug(debug=kwargs.pop("litellm_debug", False))
        return StreamingLiteLLM(
            model_name=model_name,
            collect_rollout_details=collect_rollout_details,
            reply_sink=self._report_reply,
            **litellm_args,
            **kwargs,
        )

    async def _report_reply(self, delta: ReplyDelta) -> None:
        sink = _REPLIES.get(self._channel or "")
        if sink is not None:
            await sink(delta)

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
