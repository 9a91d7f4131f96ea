"""Live tokens: the scripted server streams (OpenAI's SSE protocol), Terminus-2's model call
streams through StreamingLiteLLM, the reply is reported as it grows (throttled) before its
step, and a model API that cannot stream still works."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from attempts_support import MODEL_INFO, needs_namespaces
from cpu_backend import CpuPreviewBackend

from engine.attempts.live_llm import ReplyThrottle, StreamingLiteLLM
from engine.attempts.observer import MemoryObserver, ReplyDelta
from engine.attempts.runner import run_attempt
from engine.attempts.spec import AttemptSpec, ModelSpec
from engine.events import Event, EventBus, ModelReplyStreamed, Publisher
from engine.recording import StoreObserver
from engine.standins.scripted_llm import Scenario, ScriptedLLMServer
from storage import queries, writes
from storage.store import Store


def _scenario() -> Scenario:
    return Scenario.from_dict(
        {
            "name": "demo",
            "turns": [
                {"analysis": "a fairly long analysis " * 8, "plan": "p"},
                {"analysis": "second", "plan": "q"},
            ],
        }
    )


async def _sse(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[str]:
    async with session.post(f"{url}/chat/completions", json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        raw = (await resp.read()).decode()
    events = [block for block in raw.split("\n\n") if block]
    assert all(block.startswith("data: ") for block in events)
    return [block.removeprefix("data: ") for block in events]


async def test_scripted_server_streams_sse_chunks_ending_in_done() -> None:
    scenario = _scenario()
    expected = scenario.turns[0].content()
    messages = [{"role": "user", "content": "go"}]
    async with ScriptedLLMServer(scenario, chunk_chars=10) as server, aiohttp.ClientSession() as s:
        body = {"model": "demo", "messages": messages, "stream": True}
        data = await _sse(s, server.base_url, body)
        assert data[-1] == "[DONE]"
        chunks = [json.loads(d) for d in data[:-1]]
        assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        pieces = [c["choices"][0]["delta"].get("content") or "" for c in chunks]
        assert "".join(pieces) == expected
        assert max(len(p) for p in pieces) == 10 and len(pieces) > len(expected) // 10
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert all("usage" not in c for c in chunks)  # not asked for
        assert server.requests[-1].streamed is True

        body["stream_options"] = {"include_usage": True}
        chunks = [json.loads(d) for d in (await _sse(s, server.base_url, body))[:-1]]
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


async def test_a_server_that_cannot_stream_answers_one_json_body() -> None:
    scenario = _scenario()
    async with (
        ScriptedLLMServer(scenario, streaming=False) as server,
        aiohttp.ClientSession() as s,
    ):
        body = {"model": "demo", "messages": [{"role": "user", "content": "go"}], "stream": True}
        async with s.post(f"{server.base_url}/chat/completions", json=body) as resp:
            assert resp.headers["Content-Type"].startswith("application/json")
            reply = await resp.json()
    assert reply["choices"][0]["message"]["content"] == scenario.turns[0].content()
    assert server.requests[-1].streamed is False


async def test_throttle_reports_at_most_once_per_interval_and_always_the_end() -> None:
    now = [0.0]
    sent: list[ReplyDelta] = []

    async def sink(delta: ReplyDelta) -> None:
        sent.append(delta)

    throttle = ReplyThrottle(sink, interval=0.1, clock=lambda: now[0])
    throttle.start()
    for i in range(20):  # 20 pieces over 0.38 s
        await throttle.grow(f"<{i}>")
        now[0] += 0.02
    await throttle.finish()
    full = "".join(f"<{i}>" for i in range(20))
    assert 4 <= len(sent) <= 6  # the first at once, then one per 0.1 s, then the end
    assert [d.offset for d in sent] == [
        sum(len(d.text) for d in sent[:k]) for k in range(len(sent))
    ]
    assert "".join(d.text for d in sent) == full
    assert [d.done for d in sent] == [False] * (len(sent) - 1) + [True]
    throttle.start()
    await throttle.grow("next")
    assert sent[-1] == ReplyDelta(2, 0, "next", False)  # a new reply starts from 0


async def test_streaming_llm_reports_the_growing_reply_in_one_model_call() -> None:
    deltas: list[ReplyDelta] = []

    async def sink(delta: ReplyDelta) -> None:
        deltas.append(delta)

    scenario = _scenario()
    async with ScriptedLLMServer(scenario, chunk_chars=8, chunk_interval=0.01) as server:
        llm = StreamingLiteLLM(
            model_name="openai/demo",
            api_base=server.base_url,
            api_key="k",
            model_info=MODEL_INFO,
            reply_sink=sink,
            report_interval=0.05,
        )
        response = await llm.call(prompt="go")
    assert response.content == scenario.turns[0].content()
    assert [r.streamed for r in server.requests] == [True]  # one call, streamed
    assert response.usage is not None and response.usage.completion_tokens > 0
    assert len(deltas) >= 3 and deltas[-1].done  # the text grew over several reports
    assert "".join(d.text for d in deltas) == response.content


async def test_an_api_that_cannot_stream_is_called_unstreamed_from_then_on() -> None:
    deltas: list[ReplyDelta] = []

    async def sink(delta: ReplyDelta) -> None:
        deltas.append(delta)

    scenario = _scenario()
    async with ScriptedLLMServer(scenario, streaming=False) as server:
        llm = StreamingLiteLLM(
            model_name="openai/demo", api_base=server.base_url, api_key="k", reply_sink=sink
        )
        first = await llm.call(prompt="go")
        history = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "x"}]
        second = await llm.call(prompt="more", message_history=history)
    assert first.content == scenario.turns[0].content()
    assert second.content == scenario.turns[1].content()
    assert llm.streaming is False and deltas == []
    # the stream that brought no text is asked once more unstreamed; then never streamed
    assert [r.turn_index for r in server.requests] == [0, 0, 1]


async def test_store_observer_publishes_the_reply_live_without_a_row(store: Store) -> None:
    def setup(db) -> int:  # type: ignore[no-untyped-def]
        writes.create_experiment(db, "exp", "exp")
        return writes.ensure_attempt(
            db, "exp", "k1", model="m", problem_id="p28", dsl="cute", arm="solo_cute", replicate=1
        )

    attempt_id = store.write_sync(setup)
    bus = EventBus()
    seen: list[Event] = []
    bus.subscribe(seen.append)
    before = store.read_sync(queries.last_event_id)
    observer = StoreObserver(Publisher(store, bus), "exp", attempt_id, 2)
    await observer.reply_streamed(attempt_id, ReplyDelta(3, 5, "more text", True))
    assert seen == [ModelReplyStreamed("exp", attempt_id, 2, 3, 5, "more text", True)]
    assert store.read_sync(queries.last_event_id) == before  # live only: no events row


@dataclass
class TimelineObserver(MemoryObserver):
    """Steps and streamed replies in the order they arrived."""

    timeline: list[tuple[str, Any]] = field(default_factory=list)

    async def step_recorded(self, attempt_id: Any, step: dict[str, Any]) -> None:
        await super().step_recorded(attempt_id, step)
        self.timeline.append(("step", step))

    async def reply_streamed(self, attempt_id: Any, delta: ReplyDelta) -> None:
        await super().reply_streamed(attempt_id, delta)
        self.timeline.append(("reply", delta))


def _spec(tmp_path: Path, server: ScriptedLLMServer) -> AttemptSpec:
    return AttemptSpec(
        model=ModelSpec(
            name="openai/p28-solo",
            api_base=server.base_url,
            api_key_env="MKB_TEST_API_KEY",
            model_info=MODEL_INFO,
        ),
        attempt_id="a1",
        problem_id="p28",
        dsl="cute",
        work_dir=tmp_path / "work",
        budget_s=120,
        environment_kwargs={"root_dir": str(tmp_path)},
    )


def _replies(timeline: list[tuple[str, Any]]) -> list[tuple[int, list[ReplyDelta], Any]]:
    """(index of the reply's first report, its reports, the first step after its end)."""
    out: list[tuple[int, list[ReplyDelta], Any]] = []
    for i, (what, item) in enumerate(timeline):
        if what == "reply" and item.offset == 0:
            out.append((i, [], None))
        if what == "reply":
            out[-1][1].append(item)
        elif out and out[-1][2] is None and out[-1][1][-1].done:
            out[-1] = (out[-1][0], out[-1][1], item)
    return out


@pytest.mark.slow
@needs_namespaces
async def test_an_attempt_streams_each_reply_before_its_step(tmp_path: Path) -> None:
    scenario = Scenario.load("p28_solo", {"dsl": "cute"})
    observer = TimelineObserver()
    server = ScriptedLLMServer(scenario, chunk_chars=12, chunk_interval=0.01)
    async with server:
        outcome = await run_attempt(_spec(tmp_path, server), CpuPreviewBackend(), observer)
    assert outcome.state == "finished" and outcome.ended_by == "task_complete", outcome.error
    assert outcome.output_tokens > 0
    assert server.requests and all(r.streamed for r in server.requests)

    replies = _replies(observer.timeline)
    assert len(replies) == len(server.requests)  # every model call streamed, none twice
    assert observer.timeline[0][0] == "step"  # the task prompt comes first
    for n, (_, deltas, step) in enumerate(replies, start=1):
        assert {d.reply for d in deltas} == {n}
        offsets = [sum(len(d.text) for d in deltas[:k]) for k in range(len(deltas))]
        assert [d.offset for d in deltas] == offsets  # the text only grows, in order
        assert [d.done for d in deltas] == [False] * (len(deltas) - 1) + [True]
        reply = json.loads("".join(d.text for d in deltas))  # the whole reply, as sent
        # ... and it is replaced by its stored step, the next thing reported after it
        assert step is not None and step["source"] == "agent"
        assert reply["analysis"].strip() in step["message"]
    assert max(len(deltas) for _, deltas, _ in replies) >= 3  # reported as it grew


@pytest.mark.slow
@needs_namespaces
async def test_an_attempt_on_an_api_that_cannot_stream_still_runs(tmp_path: Path) -> None:
    scenario = Scenario.load("p28_solo", {"dsl": "cute"})
    observer = MemoryObserver()
    async with ScriptedLLMServer(scenario, streaming=False) as server:
        outcome = await run_attempt(_spec(tmp_path, server), CpuPreviewBackend(), observer)
    assert outcome.state == "finished" and outcome.ended_by == "task_complete", outcome.error
    assert outcome.submissions_used == 1 and observer.replies == []
    turns = [s for _, s in observer.steps if s["source"] == "agent"]
    assert "Analysis: A fresh CuTe DSL sandbox" in turns[0]["message"]
    # only the first call was asked to stream (and asked again unstreamed)
    assert server.requests[0].turn_index == server.requests[1].turn_index == 0
