"""A scripted OpenAI-compatible chat server that replays a scenario turn by turn.

Used by tests and the demo in place of a real model. A scenario (TOML, see
``engine/standins/scenarios/``) is a list of turns; each turn is one assistant reply in Terminus-2's
JSON format (``analysis``, ``plan``, ``commands``, ``task_complete``), or a ``raw`` reply
(e.g. deliberately unparseable text), or an HTTP ``status`` error. The server is stateless
per conversation: the turn index is the number of assistant messages already in the request,
so concurrent attempts and restarted agents each replay from their own position. A turn with
``wait_for`` is held back (the server answers two-second waits, marked so they do not count
as turns) until its text shows up in the terminal output, e.g. feedback after ``submit``.
A turn with ``repeat_until`` is sent again (marked the same way) until its text shows up,
e.g. a ``submit`` refused at the submission limit, retried until an operator's extend lets it
through; both give up after ``MAX_WAITS`` fillers.
When the script runs out, the server answers ``task_complete`` so the agent finishes.

A request with ``"stream": true`` is answered in OpenAI's streaming protocol (server-sent
events: ``data:`` chat-completion chunks of ``chunk_chars`` characters, ``chunk_interval``
seconds apart, then ``data: [DONE]``; the usage comes in a last chunk when
``stream_options.include_usage`` asks for it). ``streaming=False`` plays a model API that
cannot stream: it ignores the flag and answers one JSON body.

Several scenarios can be served at once: the request's ``model`` picks one by name (litellm
strips the ``openai/`` prefix), falling back to the default scenario.

Placeholders ``{{dsl}}``, ``{{dsl_name}}``, ``{{dsl_module}}`` and ``{{problem_id}}`` in any
string of a turn are replaced with the scenario's variables.

:func:`scripted_endpoint` is the attempt runner's model endpoint for a ``scenario`` in the
model's extras: the engine's factory injects it; the production runner never imports this
module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import tomllib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiohttp import web

from engine.attempts.spec import AttemptSpec, ModelEndpointError

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
SCRIPTED_KEY_ENV = "MKB_SCRIPTED_API_KEY"
DSL_NAMES = {"cute": "CuTe DSL", "tirx": "TIRx"}
DSL_MODULES = {"cute": "cutlass.cute", "tirx": "tvm.tirx"}


class ScenarioError(ModelEndpointError, ValueError):
    """A scenario file is malformed."""


@dataclass
class Turn:
    """One scripted assistant reply."""

    analysis: str = ""
    plan: str = ""
    commands: list[dict[str, Any]] = field(default_factory=list)
    task_complete: bool = False
    raw: str | None = None
    status: int | None = None
    delay: float = 0.0
    expect: str | None = None  # a substring the latest user message should contain
    wait_for: str | None = None  # hold this turn back until the latest user message has it
    repeat_until: str | None = None  # send this turn again until the latest user message has it

    def content(self) -> str:
        if self.raw is not None:
            return self.raw
        return json.dumps(
            {
                "analysis": self.analysis,
                "plan": self.plan,
                "commands": self.commands,
                "task_complete": self.task_complete,
            }
        )


@dataclass
class Scenario:
    """A named list of turns."""

    name: str
    turns: list[Turn]
    description: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any], variables: dict[str, str] | None = None) -> Scenario:
        variables = dict(variables or {})
        if "dsl" in variables:
            variables.setdefault("dsl_name", DSL_NAMES.get(variables["dsl"], variables["dsl"]))
            variables.setdefault("dsl_module", DSL_MODULES.get(variables["dsl"], variables["dsl"]))
        turns_raw = data.get("turns")
        if not isinstance(turns_raw, list) or not turns_raw:
            raise ScenarioError("a scenario needs a non-empty [[turns]] list")
        turns = []
        for i, raw in enumerate(turns_raw):
            if not isinstance(raw, dict):
                raise ScenarioError(f"turn {i + 1} is not a table")
            unknown = set(raw) - set(Turn.__dataclass_fields__)
            if unknown:
                raise ScenarioError(f"turn {i + 1} has unknown keys {sorted(unknown)}")
            turns.append(Turn(**_substitute(raw, variables)))
        return cls(
            name=str(data.get("name", "scenario")),
            turns=turns,
            description=str(data.get("description", "")),
        )

    @classmethod
    def load(cls, path: Path | str, variables: dict[str, str] | None = None) -> Scenario:
        path = Path(path)
        if not path.is_file() and not path.suffix:
            path = SCENARIO_DIR / f"{path}.toml"
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ScenarioError(f"{path}: {exc}") from exc
        return cls.from_dict(data, variables)


def demo_scenarios() -> dict[str, Scenario]:
    """The demo's scenarios keyed by model name: ``scripted-{solo,skill}-{cute,tirx}``.

    Serve them with ``ScriptedLLMServer(demo_scenarios())`` and use the litellm model name
    ``openai/scripted-solo-cute`` (etc.) with the server's ``base_url`` as ``api_base``.
    """
    out: dict[str, Scenario] = {}
    for kind, file in (("solo", "p28_solo"), ("skill", "p28_skill")):
        for dsl in DSL_NAMES:
            out[f"scripted-{kind}-{dsl}"] = Scenario.load(file, {"dsl": dsl})
    return out


def _substitute(value: Any, variables: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, replacement in variables.items():
            value = value.replace("{{" + key + "}}", replacement)
        return value
    if isinstance(value, list):
        return [_substitute(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, variables) for k, v in value.items()}
    return value


FINISH = Turn(analysis="The scripted session is over.", plan="Finish.", task_complete=True)
WAIT_MARKER = "[scripted wait]"
MAX_WAITS = 60


def wait_turn(text: str) -> Turn:
    """A filler reply that waits two seconds for ``text`` to show up in the terminal."""
    return Turn(
        analysis=f"{WAIT_MARKER} waiting for: {text}",
        plan="Wait.",
        commands=[{"keystrokes": "", "duration": 2.0}],
    )


@dataclass
class RequestRecord:
    """What the server saw and answered (for tests and debugging)."""

    scenario: str
    turn_index: int
    last_user_message: str
    status: int
    expectation_met: bool | None
    authorization: str = ""
    streamed: bool = False


class ScriptedLLMServer:
    """An aiohttp server on 127.0.0.1 serving ``/v1/chat/completions`` from scenarios."""

    def __init__(
        self,
        scenarios: Scenario | dict[str, Scenario],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        streaming: bool = True,
        chunk_chars: int = 16,
        chunk_interval: float = 0.0,
    ) -> None:
        if isinstance(scenarios, Scenario):
            scenarios = {scenarios.name: scenarios}
        if not scenarios:
            raise ScenarioError("no scenarios to serve")
        self.scenarios = dict(scenarios)
        self.default = next(iter(self.scenarios.values()))
        self.host = host
        self.port = port
        self.streaming = streaming
        self.chunk_chars = max(1, chunk_chars)
        self.chunk_interval = chunk_interval
        self.requests: list[RequestRecord] = []
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> ScriptedLLMServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])  # the bound port when port=0
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ScriptedLLMServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": name, "object": "model", "owned_by": "mkb"} for name in self.scenarios]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "invalid JSON body"}}, status=400)
        model = str(body.get("model", ""))
        scenario = self.scenarios.get(model) or self.scenarios.get(
            model.split("/")[-1], self.default
        )
        messages = body.get("messages") or []
        replies = [_text(m.get("content")) for m in messages if m.get("role") == "assistant"]
        index = sum(1 for r in replies if WAIT_MARKER not in r)
        waits = 0
        while waits < len(replies) and WAIT_MARKER in replies[-1 - waits]:
            waits += 1
        last_user = next(
            (_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), ""
        )
        turn = scenario.turns[index] if index < len(scenario.turns) else FINISH
        previous = scenario.turns[index - 1] if 0 < index <= len(scenario.turns) else None
        if (previous and previous.repeat_until and previous.repeat_until not in last_user
                and waits < MAX_WAITS):
            turn = replace(previous, analysis=f"{WAIT_MARKER} again until: "
                           f"{previous.repeat_until}. {previous.analysis}")
        elif turn.wait_for and turn.wait_for not in last_user and waits < MAX_WAITS:
            turn = wait_turn(turn.wait_for)
        met = None if turn.expect is None else turn.expect in last_user
        auth = request.headers.get("Authorization", "")
        if turn.delay:
            await asyncio.sleep(turn.delay)
        stream = self.streaming and body.get("stream") is True
        record = RequestRecord(scenario.name, index, last_user, 200, met, auth, stream)
        if turn.status and turn.status >= 400:
            self.requests.append(replace(record, status=turn.status, streamed=False))
            return web.json_response(
                {"error": {"message": f"scripted error {turn.status}", "type": "server_error"}},
                status=turn.status,
            )
        content = turn.content()
        self.requests.append(record)
        prompt_tokens = sum(len(_text(m.get("content"))) for m in messages) // 4 + 1
        completion_tokens = len(content) // 4 + 1
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        head = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "created": int(time.time()),
            "model": model or scenario.name,
        }
        if stream:
            options = body.get("stream_options") or {}
            with_usage = isinstance(options, dict) and options.get("include_usage") is True
            return await self._stream(request, head, content, usage if with_usage else None)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop",
        }
        return web.json_response(
            {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
        )

    async def _stream(
        self,
        request: web.Request,
        head: dict[str, Any],
        content: str,
        usage: dict[str, int] | None,
    ) -> web.StreamResponse:
        """``content`` as server-sent chat-completion chunks, ended by ``data: [DONE]``."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        def delta(fields: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
            return [{"index": 0, "delta": fields, "finish_reason": finish}]

        await send(delta({"role": "assistant", "content": ""}))
        size = self.chunk_chars
        for start in range(0, len(content), size):
            if start and self.chunk_interval:
                await asyncio.sleep(self.chunk_interval)
            await send(delta({"content": content[start : start + size]}))
        await send(delta({}, "stop"))
        if usage is not None:
            await send([], usage=usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


@contextlib.asynccontextmanager
async def scripted_endpoint(spec: AttemptSpec) -> AsyncIterator[AttemptSpec]:
    """The spec to run; a ``scenario`` in the model's extras starts a scripted model server.

    The scenario (a bundled name such as ``p28_solo`` or a TOML path; ``{kind}`` in it
    becomes ``solo`` or ``skill`` by arm, e.g. ``p28_{kind}``) is served on 127.0.0.1 for
    this attempt only, with the attempt's DSL and problem as its variables; ``{problem}``
    becomes the problem id (e.g. ``{problem}_{kind}``). Without a scenario the spec is run as
    it is.
    """
    extra = dict(spec.model.extra)
    scenario = extra.pop("scenario", None)
    if scenario is None:
        yield spec
        return
    scenario = str(scenario).replace("{kind}", "skill" if spec.is_transfer else "solo")
    scenario = scenario.replace("{problem}", spec.problem_id)
    variables = {"dsl": spec.dsl, "problem_id": spec.problem_id}
    server = ScriptedLLMServer(Scenario.load(scenario, variables))
    await server.start()
    os.environ.setdefault(SCRIPTED_KEY_ENV, "scripted")
    model = replace(
        spec.model,
        name="openai/" + spec.model.name.split("/")[-1],
        api_base=server.base_url,
        api_key_env=spec.model.api_key_env or SCRIPTED_KEY_ENV,
        extra=extra,
    )
    try:
        yield replace(spec, model=model)
    finally:
        await server.stop()
