"""Scripted Terminus-2 attempts end to end: sandbox, mailbox, feedback, skill, faults."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from attempts_support import FIXTURES, MODEL_INFO, needs_namespaces
from cpu_backend import CpuPreviewBackend

from engine.attempts.mailbox import Mailbox
from engine.attempts.observer import MemoryObserver
from engine.attempts.runner import run_attempt
from engine.attempts.spec import AttemptSpec, ModelSpec
from engine.retry import RetryPolicy
from engine.standins.scripted_llm import (
    WAIT_MARKER,
    Scenario,
    ScriptedLLMServer,
    scripted_endpoint,
)


def _spec(tmp_path: Path, server: ScriptedLLMServer, model: str, **kwargs) -> AttemptSpec:
    defaults = dict(
        attempt_id="a1",
        problem_id="p28",
        dsl="cute",
        work_dir=tmp_path / "work",
        budget_s=120,
        environment_kwargs={"root_dir": str(tmp_path)},
    )
    defaults.update(kwargs)
    return AttemptSpec(
        model=ModelSpec(
            name=f"openai/{model}",
            api_base=server.base_url,
            api_key_env="MKB_TEST_API_KEY",
            model_info=MODEL_INFO,
        ),
        **defaults,
    )


@pytest.mark.slow
@needs_namespaces
async def test_solo_attempt_submits_gets_feedback_writes_skill(tmp_path: Path) -> None:
    scenario = Scenario.load("p28_solo", {"dsl": "cute"})
    backend = CpuPreviewBackend(fail_final=1)
    observer = MemoryObserver()
    async with ScriptedLLMServer(scenario) as server:
        outcome = await run_attempt(_spec(tmp_path, server, "p28-solo"), backend, observer)

    assert outcome.state == "finished" and outcome.ended_by == "task_complete", outcome.error
    assert outcome.submissions_used == 1 and outcome.tries == 1
    assert outcome.final_feedback is not None and outcome.final_feedback.verdict == "preview"
    assert "import cutlass.cute" in (outcome.final_source or "")
    assert (outcome.skill or "").startswith("# p28 fused add + RMSNorm (CuTe DSL)")
    assert outcome.input_tokens > 0 and outcome.output_tokens > 0 and outcome.agent_seconds > 0

    # every turn reached the observer, in order, with analysis, keystrokes and terminal output
    steps = [s for _, s in observer.steps]
    assert [s["step_id"] for s in steps] == list(range(1, len(steps) + 1))
    agent_steps = [s for s in steps if s["source"] == "agent"]
    turns = [s for s in agent_steps if WAIT_MARKER not in s["message"]]
    assert len(turns) == len(scenario.turns) + 1  # + the confirmation turn
    assert "Analysis: A fresh CuTe DSL sandbox" in turns[0]["message"]
    keys = turns[2]["tool_calls"][0]["arguments"]["keystrokes"]
    assert keys.startswith("submit solution.py")
    terminal = "".join(s["observation"]["results"][0]["content"] for s in agent_steps)
    assert "Feedback for submission 1 of 10" in terminal
    assert all(s["metrics"]["completion_tokens"] > 0 for s in agent_steps)

    # the submission, its feedback and the skill reached the observer
    assert [(n, "def solve" in src) for _, n, src in observer.submissions] == [(1, True)]
    assert [(n, f.verdict) for _, n, f in observer.feedback] == [(1, "preview")]
    assert observer.skills and observer.skills[-1][1] == outcome.skill
    # the model saw the feedback when its fourth turn was served (under load the server may
    # first answer a few "[scripted wait]" fillers while the grading runs)
    served = [r for r in server.requests if r.turn_index == 3 and r.expectation_met is not None]
    assert served and served[-1].expectation_met is True
    kinds = observer.event_kinds()
    assert kinds[0] == "task_built" and kinds[-1] == "final_evaluation"
    assert "warning" not in kinds  # model_info was given
    retry = [e for _, e in observer.events if e["kind"] == "grading_retry"]
    assert [e["purpose"] for e in retry] == ["final"]  # a final-evaluation retry re-grades
    assert [r.purpose for r in backend.requests] == ["submission", "final", "final"]
    assert observer.outcomes == [("a1", outcome)]

    # the key went to the model endpoint, never into the trial's files
    assert server.requests[0].authorization == "Bearer sk-test-123"
    trial_dir = Path(outcome.trial_dirs[0])
    for path in trial_dir.rglob("*"):
        if path.is_file():
            assert b"sk-test-123" not in path.read_bytes(), path


@pytest.mark.slow
@needs_namespaces
async def test_skill_conditioned_attempt_sees_the_source_skill(tmp_path: Path) -> None:
    skill = "# p28 notes\n\n- Verified: float32 accumulation, one final rounding (2/2 draws).\n"
    scenario = Scenario.load("p28_skill", {"dsl": "tirx"})
    observer = MemoryObserver()
    async with ScriptedLLMServer(scenario) as server:
        spec = _spec(
            tmp_path, server, "p28-skill", dsl="tirx", source_skill=skill, transfer_from="cute"
        )
        outcome = await run_attempt(spec, CpuPreviewBackend(), observer)
    assert outcome.state == "finished", outcome.error
    assert server.requests[0].expectation_met is True
    assert skill in server.requests[0].last_user_message  # verbatim in the first prompt
    instruction = (tmp_path / "work" / "task" / "a1" / "instruction.md").read_text()
    assert instruction.endswith(skill) and "CuTe DSL instead of TIRx" in instruction
    assert outcome.final_feedback.verdict == "preview"
    assert "TIRx, after prior notes" in (outcome.skill or "")


@pytest.mark.slow
@needs_namespaces
async def test_two_attempts_run_concurrently_in_separate_sandboxes(tmp_path: Path) -> None:
    scenarios = {
        "solo-cute": Scenario.load("p28_solo", {"dsl": "cute"}),
        "solo-tirx": Scenario.load("p28_solo", {"dsl": "tirx"}),
    }
    observer = MemoryObserver()
    async with ScriptedLLMServer(scenarios) as server:
        specs = [
            _spec(
                tmp_path,
                server,
                f"solo-{dsl}",
                attempt_id=f"c-{dsl}",
                dsl=dsl,
                work_dir=tmp_path / dsl,
            )
            for dsl in ("cute", "tirx")
        ]
        outcomes = await asyncio.gather(
            *(run_attempt(s, CpuPreviewBackend(), observer) for s in specs)
        )
    assert [o.state for o in outcomes] == ["finished", "finished"]
    assert "cutlass.cute" in outcomes[0].final_source and "tvm.tirx" in outcomes[1].final_source
    assert "(CuTe DSL)" in outcomes[0].skill and "(TIRx)" in outcomes[1].skill
    for aid in ("c-cute", "c-tirx"):
        assert [n for a, n, _ in observer.submissions if a == aid] == [1]


async def test_blank_or_missing_source_skill_skips_the_treatment(tmp_path: Path) -> None:
    observer = MemoryObserver()
    for skill in (None, "  \n\t"):
        spec = AttemptSpec(
            attempt_id="t1",
            problem_id="p28",
            dsl="tirx",
            work_dir=tmp_path,
            model=ModelSpec(name="openai/unused"),
            source_skill=skill,
            transfer_from="cute",
        )
        outcome = await run_attempt(spec, CpuPreviewBackend(), observer)
        assert outcome.state == "skipped" and outcome.final_feedback is None
    assert observer.event_kinds() == ["skipped", "skipped"]
    assert not (tmp_path / "task").exists()  # nothing was built or run


@pytest.mark.slow
@needs_namespaces
async def test_faults_are_recorded_and_the_attempt_ends_cleanly(tmp_path: Path) -> None:
    scenario = Scenario.load(FIXTURES / "faults.toml")
    backend = CpuPreviewBackend(fail_first=1)
    observer = MemoryObserver()
    async with ScriptedLLMServer(scenario) as server:
        spec = _spec(tmp_path, server, "faults", max_submissions=1)
        outcome = await run_attempt(spec, backend, observer)

    met = [r.expectation_met for r in server.requests if r.expectation_met is not None]
    assert met == [True, True, True]
    # the unparseable reply was recorded as a step and the agent carried on
    agent_steps = [s for _, s in observer.steps if s["source"] == "agent"]
    assert agent_steps[0]["message"].startswith("Sure! I will now write")
    assert "parsing errors" in agent_steps[0]["observation"]["results"][0]["content"]
    # bad submissions refused with reasons; the 2nd submission over the allowance refused
    assert [r for _, r, _ in observer.rejections] == ["not_a_file", "too_large", "limit"]
    assert "400000 bytes" in observer.rejections[1][2]
    assert [n for _, n, _ in observer.submissions] == [1]
    assert [f.verdict for _, _, f in observer.feedback] == ["preview"]
    kinds = observer.event_kinds()
    assert "grading_retry" in kinds  # the injected grader failure was retried
    assert "shell_exited" in kinds  # the agent ended its own shell
    assert outcome.state == "finished" and outcome.ended_by == "shell_exited"
    assert outcome.submissions_used == 1 and outcome.tries == 1
    assert outcome.final_feedback.verdict == "preview"
    assert "submit limit was enforced" in (outcome.skill or "")


@needs_namespaces
async def test_a_sandbox_that_fails_to_start_is_retried_then_fails(tmp_path: Path) -> None:
    observer = MemoryObserver()
    async with ScriptedLLMServer(Scenario.load("p28_solo", {"dsl": "cute"})) as server:
        spec = _spec(
            tmp_path,
            server,
            "p28-solo",
            environment_kwargs={"root_dir": str(tmp_path), "private_dirs": ["/proc/sys/mkb-x"]},
        )
        outcome = await run_attempt(spec, CpuPreviewBackend(), observer)
    assert outcome.state == "failed" and outcome.tries == 3
    assert outcome.error and "mkb-x" in outcome.error
    assert observer.event_kinds().count("execution_retry") == 2
    assert server.requests == []  # the model was never called
    assert len(outcome.trial_dirs) == 3 and all(Path(d).is_dir() for d in outcome.trial_dirs)


@pytest.mark.slow
@needs_namespaces
async def test_early_stop_collects_and_evaluates(tmp_path: Path) -> None:
    stop = asyncio.Event()

    class StopAfterFeedback(MemoryObserver):
        async def feedback_returned(self, attempt_id, n, feedback) -> None:
            await super().feedback_returned(attempt_id, n, feedback)
            stop.set()

    observer = StopAfterFeedback()
    scenario = Scenario.load("p28_solo", {"dsl": "tirx"})
    async with ScriptedLLMServer(scenario) as server:
        spec = _spec(tmp_path, server, "p28-solo", dsl="tirx")
        outcome = await run_attempt(spec, CpuPreviewBackend(), observer, stop=stop)
    assert outcome.state == "finished" and outcome.ended_by == "stop"
    assert outcome.final_feedback.verdict == "preview"
    assert "tvm.tirx" in (outcome.final_source or "")
    assert "stop_requested" in observer.event_kinds()
    result = json.loads((Path(outcome.trial_dirs[0]) / "result.json").read_text())
    assert result["exception_info"]["exception_type"] == "CancelledError"


@pytest.mark.slow
@needs_namespaces
async def test_waiting_for_feedback_counts_against_the_budget(tmp_path: Path) -> None:
    backend = CpuPreviewBackend(submission_delay_s=30, raise_final=2)
    observer = MemoryObserver()
    async with ScriptedLLMServer(Scenario.load("p28_solo", {"dsl": "cute"})) as server:
        spec = _spec(tmp_path, server, "p28-solo", budget_s=8)
        outcome = await run_attempt(spec, backend, observer)
    assert outcome.state == "finished" and outcome.ended_by == "budget"
    assert outcome.agent_seconds < 15  # the agent was stopped while submit was still waiting
    assert [n for _, n, _ in observer.submissions] == [1]
    assert observer.feedback == []  # never graded: the budget ran out while it waited
    assert "submission_abandoned" in observer.event_kinds()
    assert "import cutlass.cute" in (outcome.final_source or "")
    assert outcome.skill is None  # the attempt never got to write SKILL.md
    assert outcome.final_feedback.verdict == "preview"  # graded after two grader crashes
    retries = [e for _, e in observer.events if e["kind"] == "grading_retry"]
    assert [e["purpose"] for e in retries] == ["final", "final"]
    assert "ConnectionError" in retries[0]["message"]


@pytest.mark.slow
@needs_namespaces
async def test_a_grader_that_keeps_failing_fails_the_final_evaluation(tmp_path: Path) -> None:
    observer = MemoryObserver()
    backend = CpuPreviewBackend(fail_final=3)
    async with ScriptedLLMServer(Scenario.load("p28_solo", {"dsl": "cute"})) as server:
        outcome = await run_attempt(_spec(tmp_path, server, "p28-solo"), backend, observer)
    assert outcome.state == "failed" and outcome.ended_by == "task_complete"
    assert outcome.final_feedback.verdict == "error"
    assert "injected failure" in (outcome.error or "")
    assert [r.purpose for r in backend.requests].count("final") == 3  # re-graded, not re-run
    assert outcome.tries == 1 and outcome.final_source and outcome.skill  # nothing lost


@needs_namespaces
async def test_a_refusing_endpoint_fails_the_attempt_without_retries(tmp_path: Path) -> None:
    observer = MemoryObserver()
    scenario = Scenario.from_dict({"name": "deny", "turns": [{"status": 401}]})
    async with ScriptedLLMServer(scenario) as server:
        outcome = await run_attempt(_spec(tmp_path, server, "deny"), CpuPreviewBackend(), observer)
    assert outcome.state == "failed" and outcome.tries == 1
    assert "AuthenticationError" in (outcome.error or "")
    assert outcome.final_feedback is None  # an infrastructure failure is not evaluated
    finished = [e for _, e in observer.events if e["kind"] == "try_finished"]
    assert finished[0]["valid"] is False and finished[0]["transient"] is False
    assert observer.outcomes[0][1].state == "failed"


@needs_namespaces
async def test_cancelling_interrupts_and_reports(tmp_path: Path, monkeypatch) -> None:
    collected: list[str] = []
    read_back = Mailbox.collect

    async def spy(self: Mailbox):  # the real read-back, counted
        collected.append(self.attempt_id)
        return await read_back(self)

    monkeypatch.setattr(Mailbox, "collect", spy)

    class CancelOnStart(MemoryObserver):
        task: asyncio.Task | None = None

        async def event(self, attempt_id, event) -> None:
            await super().event(attempt_id, event)
            if event["kind"] == "agent_started" and self.task is not None:
                self.task.cancel()

    observer = CancelOnStart()
    async with ScriptedLLMServer(Scenario.load("p28_solo", {"dsl": "cute"})) as server:
        spec = _spec(tmp_path, server, "p28-solo")
        observer.task = asyncio.create_task(run_attempt(spec, CpuPreviewBackend(), observer))
        with pytest.raises(asyncio.CancelledError):
            await observer.task
    assert [o.state for _, o in observer.outcomes] == ["interrupted"]
    result = json.loads((tmp_path / "work" / "trials" / "a1-try1" / "result.json").read_text())
    assert result["exception_info"]["exception_type"] == "CancelledError"
    assert not any((tmp_path / "mkb-sandboxes").iterdir())  # the sandbox was torn down
    assert collected == []  # a cancelled try's result is dropped: nothing is read back


@needs_namespaces
@pytest.mark.skipif(not os.environ.get("MKB_SLOW_TESTS"), reason="set MKB_SLOW_TESTS=1 (~40 s)")
async def test_an_endpoint_that_is_down_fails_the_attempt(tmp_path: Path) -> None:
    observer = MemoryObserver()
    spec = AttemptSpec(
        attempt_id="down",
        problem_id="p28",
        dsl="cute",
        work_dir=tmp_path / "work",
        model=ModelSpec(
            name="openai/x",
            api_base="http://127.0.0.1:9/v1",
            api_key_env="MKB_TEST_API_KEY",
            model_info=MODEL_INFO,
        ),
        environment_kwargs={"root_dir": str(tmp_path)},
        retry=RetryPolicy(max_tries=1),
    )
    outcome = await run_attempt(spec, CpuPreviewBackend(), observer)
    assert outcome.state == "failed"
    assert "Connection" in (outcome.error or "")


@pytest.mark.slow
@needs_namespaces
async def test_attempt_with_the_local_grading_backend(tmp_path: Path) -> None:
    local = pytest.importorskip("engine.grading.backends.local")
    backend = local.LocalBackend(gpus=None, preload_dsls=False)
    observer = MemoryObserver()
    try:
        async with ScriptedLLMServer(Scenario.load("p28_solo", {"dsl": "tirx"})) as server:
            spec = _spec(tmp_path, server, "p28-solo", dsl="tirx", budget_s=300)
            outcome = await run_attempt(spec, backend, observer)
    finally:
        await backend.close()
    assert outcome.state == "finished", outcome.error
    assert [f.verdict for _, _, f in observer.feedback] == ["preview"]
    assert outcome.final_feedback.verdict == "preview"
    assert not outcome.final_feedback.scored_pass


@pytest.mark.slow
@needs_namespaces
async def test_a_scenario_in_the_model_extras_serves_a_scripted_model(tmp_path: Path) -> None:
    observer = MemoryObserver()
    skill = "# notes\n\n- Verified float32 accumulation.\n"
    spec = AttemptSpec(
        attempt_id="s1",
        problem_id="p28",
        dsl="tirx",
        work_dir=tmp_path / "work",
        model=ModelSpec(name="scripted", extra={"scenario": "p28_{kind}"}),
        source_skill=skill,
        transfer_from="cute",
        environment_import_path="local",
        environment_kwargs={"root_dir": str(tmp_path)},
    )
    outcome = await run_attempt(
        spec, CpuPreviewBackend(), observer, endpoint=scripted_endpoint
    )  # the factory injects it
    assert outcome.state == "finished", outcome.error
    assert "warning" in observer.event_kinds()  # no model_info was given
    assert "TIRx, after prior notes" in (outcome.skill or "")  # the skill scenario ran
    assert "tvm.tirx" in (outcome.final_source or "")
    bad = AttemptSpec(
        attempt_id="s2",
        problem_id="p28",
        dsl="cute",
        work_dir=tmp_path / "bad",
        model=ModelSpec(name="scripted", extra={"scenario": "no_such_scenario"}),
    )
    failed = await run_attempt(bad, CpuPreviewBackend(), observer, endpoint=scripted_endpoint)
    assert failed.state == "failed" and "scenario" in (failed.error or "")


def test_environment_names_map_to_harbor_configs() -> None:
    from engine.attempts.runner import environment_config

    base = dict(
        attempt_id="e",
        problem_id="p28",
        dsl="cute",
        model=ModelSpec("openai/x"),
        work_dir=Path("/tmp/x"),
    )
    local = environment_config(AttemptSpec(**base, environment_import_path="local"))
    assert local.import_path == "engine.sandbox.local_ns:LocalNamespaceEnvironment"
    docker = environment_config(AttemptSpec(**base, environment_import_path="docker"))
    assert docker.type == "docker" and docker.import_path is None
