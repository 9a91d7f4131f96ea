"""The scripted OpenAI-compatible server replays scenarios turn by turn."""

from __future__ import annotations

import json

import aiohttp
import pytest

from engine.standins.scripted_llm import (
    SCENARIO_DIR,
    WAIT_MARKER,
    Scenario,
    ScenarioError,
    ScriptedLLMServer,
    demo_scenarios,
)


def _scenario() -> Scenario:
    return Scenario.from_dict(
        {
            "name": "demo",
            "turns": [
                {
                    "analysis": "a {{dsl_name}}",
                    "plan": "p",
                    "commands": [{"keystrokes": "echo {{dsl}} {{dsl_module}}\n", "duration": 0.1}],
                },
                {"raw": "not json", "expect": "OUTPUT-1"},
                {"status": 503},
            ],
        },
        {"dsl": "tirx"},
    )


async def _post(session: aiohttp.ClientSession, url: str, messages: list[dict]) -> tuple[int, dict]:
    async with session.post(
        f"{url}/chat/completions",
        json={"model": "demo", "messages": messages},
        headers={"Authorization": "Bearer k1"},
    ) as resp:
        return resp.status, await resp.json()


async def test_replays_by_assistant_count_and_substitutes_variables() -> None:
    async with ScriptedLLMServer(_scenario()) as server, aiohttp.ClientSession() as s:
        status, body = await _post(s, server.base_url, [{"role": "user", "content": "go"}])
        assert status == 200
        reply = json.loads(body["choices"][0]["message"]["content"])
        assert reply["analysis"] == "a TIRx"
        assert reply["commands"][0]["keystrokes"] == "echo tirx tvm.tirx\n"
        assert body["usage"]["completion_tokens"] > 0

        history = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": "OUTPUT-1 here"},
        ]
        status, body = await _post(s, server.base_url, history)
        assert body["choices"][0]["message"]["content"] == "not json"
        assert server.requests[-1].expectation_met is True
        assert server.requests[-1].authorization == "Bearer k1"

        history += [{"role": "assistant", "content": "y"}, {"role": "user", "content": "z"}]
        status, body = await _post(s, server.base_url, history)
        assert status == 503

        history += [{"role": "assistant", "content": "w"}, {"role": "user", "content": "v"}]
        status, body = await _post(s, server.base_url, history)
        finish = json.loads(body["choices"][0]["message"]["content"])
        assert finish["task_complete"] is True and finish["commands"] == []


async def test_wait_for_holds_a_turn_back_without_counting_the_waits() -> None:
    scenario = Scenario.from_dict(
        {"turns": [{"analysis": "one"}, {"analysis": "two", "wait_for": "DONE"}]}
    )
    async with ScriptedLLMServer(scenario) as server, aiohttp.ClientSession() as s:
        history = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "turn one"},
            {"role": "user", "content": "still running"},
        ]
        for _ in range(2):  # the awaited text is not there yet: two waits
            _, body = await _post(s, server.base_url, history)
            reply = body["choices"][0]["message"]["content"]
            assert WAIT_MARKER in reply and json.loads(reply)["commands"][0]["duration"] == 2.0
            history += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": "still running"},
            ]
        history[-1] = {"role": "user", "content": "DONE"}
        _, body = await _post(s, server.base_url, history)
        assert json.loads(body["choices"][0]["message"]["content"])["analysis"] == "two"


async def test_repeat_until_sends_a_turn_again_until_its_text_shows() -> None:
    """A submit refused at the limit is sent again, not counted, until its feedback shows."""
    scenario = Scenario.from_dict({"turns": [
        {"analysis": "submit", "commands": [{"keystrokes": "submit\n", "duration": 1.0}],
         "repeat_until": "Feedback for submission 1"},
        {"analysis": "done", "task_complete": True},
    ]})
    async with ScriptedLLMServer(scenario) as server, aiohttp.ClientSession() as s:
        history = [{"role": "user", "content": "go"}]
        for refused in range(3):  # the first send, then two sent again while refused
            _, body = await _post(s, server.base_url, history)
            reply = body["choices"][0]["message"]["content"]
            sent = json.loads(reply)
            assert sent["commands"][0]["keystrokes"] == "submit\n"
            assert (WAIT_MARKER in sent["analysis"]) == (refused > 0)
            history += [{"role": "assistant", "content": reply},
                        {"role": "user", "content": "Refused: all 0 submissions are used"}]
        history[-1] = {"role": "user", "content": "=== Feedback for submission 1 of 1 ==="}
        _, body = await _post(s, server.base_url, history)
        assert json.loads(body["choices"][0]["message"]["content"])["analysis"] == "done"


def test_bundled_scenarios_load_for_both_dsls() -> None:
    names = sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))
    assert {"p28_solo", "p28_skill"} <= set(names)
    for name in names:
        for dsl in ("cute", "tirx"):
            scenario = Scenario.load(name, {"dsl": dsl})
            text = json.dumps([t.content() for t in scenario.turns])
            assert "{{" not in text
            assert ("cutlass.cute" in text) == (dsl == "cute")


async def test_demo_scenarios_are_served_by_model_name() -> None:
    scenarios = demo_scenarios()
    assert set(scenarios) == {
        f"scripted-{k}-{d}" for k in ("solo", "skill") for d in ("cute", "tirx")
    }
    async with ScriptedLLMServer(scenarios) as server, aiohttp.ClientSession() as s:
        for name in ("scripted-skill-tirx", "scripted-solo-cute"):
            async with s.post(
                f"{server.base_url}/chat/completions",
                json={"model": name, "messages": [{"role": "user", "content": "go"}]},
            ) as resp:
                body = await resp.json()
            first = json.loads(body["choices"][0]["message"]["content"])
            assert first == json.loads(scenarios[name].turns[0].content())
        assert server.requests[0].expectation_met is False  # no prior notes in "go"


def test_malformed_scenarios_are_rejected(tmp_path) -> None:
    with pytest.raises(ScenarioError, match="non-empty"):
        Scenario.from_dict({"name": "x", "turns": []})
    with pytest.raises(ScenarioError, match="unknown keys"):
        Scenario.from_dict({"turns": [{"analysis": "a", "bogus": 1}]})
    bad = tmp_path / "bad.toml"
    bad.write_text("turns = [")
    with pytest.raises(ScenarioError):
        Scenario.load(bad)
