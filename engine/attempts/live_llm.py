"""Live tokens: Harbor's LiteLLM whose chat completions stream, reporting the reply as it grows.

Harbor 0.25 cannot stream by itself: ``LiteLLM.call`` raises ``NotImplementedError`` when
litellm hands back a stream, and no hook of Harbor's sees a chunk. litellm's own streaming
callbacks (``CustomLogger.async_log_stream_event``) fire only for calls made with
``stream=True``, so a callback alone cannot help: the agent's one model call itself has to
stream (a second, streaming request beside it would double every model call).

:class:`StreamingLiteLLM` is that call. Terminus-2 builds it in place of ``LiteLLM``
(``ObservedTerminus2._init_llm``) and it overrides :meth:`~StreamingLiteLLM.call` for plain
chat completions: the same request Harbor builds (its base kwargs, messages, API format),
sent with ``stream=True``; the chunks feed a :class:`ReplyThrottle` (at most one report per
``interval``, the last always) and are assembled by ``litellm.stream_chunk_builder`` into the
response Harbor's own extractors read (usage, cost), so the agent gets the reply it would
have got. Everything else (no live reader, the Responses API, structured output, rollout
details, thinking budgets, session ids) goes to Harbor's ``call`` unchanged. An API that
cannot stream (an error other than a transient one, or a stream with no text, e.g. a server
that ignores ``stream`` and answers one JSON body) turns streaming off for the rest of the
agent's run and the call is made again Harbor's way; a transient error is retried Harbor's
way too (its retries), streaming stays on.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import litellm
from harbor.llms.base import ContextLengthExceededError, LLMResponse, OutputLengthExceededError
from harbor.llms.lite_llm import LiteLLM
from harbor.llms.utils import add_anthropic_caching

from engine.attempts.observer import ReplyDelta

ReplySink = Callable[[ReplyDelta], Awaitable[None]]
REPORT_INTERVAL_S = 0.1  # at most ~10 reports a second per attempt
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    litellm.RateLimitError,
    litellm.InternalServerError,
    litellm.ServiceUnavailableError,
    litellm.BadGatewayError,
    litellm.APIConnectionError,
    litellm.Timeout,
)
FATAL_ERRORS: tuple[type[Exception], ...] = (
    ContextLengthExceededError,  # Terminus-2 summarises on it
    OutputLengthExceededError,  # carries the truncated reply
    litellm.AuthenticationError,
)
log = logging.getLogger(__name__)


class NotStreamedError(RuntimeError):
    """A streamed call brought no text: the API does not really stream."""


class ReplyThrottle:
    """Turns a growing reply into :class:`ReplyDelta` reports, at most one per ``interval``
    seconds (the first text at once, the end of the reply always)."""

    def __init__(
        self,
        sink: ReplySink,
        interval: float = REPORT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink, self.interval, self.clock = sink, interval, clock
        self.reply = 0
        self._pending: list[str] = []  # text not reported yet
        self._sent = 0  # characters already reported
        self._last = -math.inf

    def start(self) -> None:
        """A new reply begins."""
        self.reply += 1
        self._pending, self._sent, self._last = [], 0, -math.inf

    async def grow(self, piece: str) -> None:
        self._pending.append(piece)
        if self.clock() - self._last >= self.interval:
            await self._report(done=False)

    async def finish(self) -> None:
        await self._report(done=True)

    async def _report(self, *, done: bool) -> None:
        text = "".join(self._pending)
        if not text and not done:
            return
        self._pending, self._last = [], self.clock()
        delta = ReplyDelta(self.reply, self._sent, text, done)
        self._sent += len(text)
        try:
            await self.sink(delta)
        except Exception:  # noqa: BLE001 - a broken reader must not fail (and redo) the call
            log.exception("reporting a streamed reply failed")


class StreamingLiteLLM(LiteLLM):
    """Harbor's LiteLLM with plain chat completions streamed to ``reply_sink``."""

    def __init__(
        self,
        *args: Any,
        reply_sink: ReplySink | None = None,
        report_interval: float = REPORT_INTERVAL_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.streaming = reply_sink is not None
        self._throttle = ReplyThrottle(reply_sink, report_interval) if reply_sink else None

    def _streamable(self, response_format: Any, kwargs: dict[str, Any]) -> bool:
        return (
            self.streaming
            and response_format is None
            and not self._use_responses_api
            and not self._collect_rollout_details
            and self._max_thinking_tokens is None
            and self._session_id is None
            and "stream" not in kwargs
        )

    async def call(  # type: ignore[override]
        self,
        prompt: str,
        message_history: list[Any] | None = None,
        response_format: Any = None,
        logging_path: Path | None = None,
        **kwargs: Any,
    ) -> LLMResponse:
        history = list(message_history or [])
        if self._streamable(response_format, kwargs):
            try:
                return await self._streamed_call(prompt, history, logging_path, dict(kwargs))
            except FATAL_ERRORS:
                raise
            except TRANSIENT_ERRORS as exc:
                log.info("streamed model call failed (%s); calling again unstreamed", exc)
            except Exception as exc:  # noqa: BLE001 - this API does not stream: Harbor's way
                log.warning("model API did not stream (%s: %s); streaming off", type(exc), exc)
                self.streaming = False
        return await super().call(prompt, history, response_format, logging_path, **kwargs)

    async def _streamed_call(
        self, prompt: str, history: list[Any], logging_path: Path | None, kwargs: dict[str, Any]
    ) -> LLMResponse:
        assert self._throttle is not None
        messages = add_anthropic_caching(
            history + [{"role": "user", "content": prompt}], self._model_name
        )
        request: dict[str, Any] = {
            **self._build_base_kwargs(logging_path),
            "messages": messages,
            "reasoning_effort": self._reasoning_effort,
        }
        if self._temperature is not None:
            request["temperature"] = self._temperature
        request.update(kwargs)
        request.update(stream=True, stream_options={"include_usage": True})
        self._apply_api_format(request)
        chunks: list[Any] = []
        self._throttle.start()
        try:
            async for chunk in await litellm.acompletion(**request):
                chunks.append(chunk)
                for choice in chunk.choices[:1]:
                    if choice.delta.content:
                        await self._throttle.grow(choice.delta.content)
        except Exception as exc:  # noqa: BLE001 - translated as Harbor does (context length)
            self._handle_litellm_error(exc)
        response = litellm.stream_chunk_builder(chunks, messages=messages) if chunks else None
        if response is None or not _has_text(response):
            raise NotStreamedError("the streamed reply had no text")
        await self._throttle.finish()
        return self._llm_response(response)

    def _llm_response(self, response: Any) -> LLMResponse:
        """Harbor's reading of a chat completion (usage, cost, truncation)."""
        hidden = getattr(response, "_hidden_params", None)
        if isinstance(hidden, dict) and not hidden.get("response_cost"):
            try:  # priced under the configured name (the chunks carry the provider's)
                hidden["response_cost"] = litellm.completion_cost(
                    completion_response=response, model=self._lookup_model_name
                )
            except Exception:  # noqa: BLE001 - unpriced model: Harbor's fallback (0)
                hidden.pop("response_cost", None)
        choice = response.choices[0]
        content = choice.message.content or ""
        if choice.finish_reason == "length":
            raise OutputLengthExceededError(
                f"Model {self._model_name} hit max_tokens limit. Response was truncated.",
                truncated_response=content,
            )
        return LLMResponse(
            content=content,
            reasoning_content=getattr(choice.message, "reasoning_content", None),
            model_name=response.get("model"),
            usage=self._extract_usage_info(response),
        )


def _has_text(response: Any) -> bool:
    choices = getattr(response, "choices", None) or []
    if not choices:
        return False
    message = choices[0].message
    return bool(message.content or getattr(message, "reasoning_content", None))
