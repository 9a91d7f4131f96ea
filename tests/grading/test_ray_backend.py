"""The Ray backend without a cluster: its config, its refusal without Ray, and its dispatch.

The dispatch tests stand a small in-process double in for Ray (``FakeRay``: actors whose
calls run on this event loop, can be held, and go quiet as a lost node's do), so the rules
are checked deterministically: one job per grader, a job whose grader goes quiet is handed to
another, the result that comes second is a duplicate (counted, recorded in the store, dropped),
and a job that loses its grader too often ends as an infrastructure error. A real cluster runs
them in ``tests/scale/test_ray_cluster.py``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.config import ConfigError, parse_config
from engine.events import EventBus, Publisher, RayStatus
from engine.grading.api import Feedback, GradeRequest
from engine.grading.backends.ledger import JOB_KEY, Duplicate, JobLedger
from engine.grading.backends.ray import RayBackend, RayUnavailable
from engine.grading.backends.ray_options import RayOptions
from engine.recording import RecordingBackend
from storage import writes
from storage.store import Store

ROOT = Path(__file__).resolve().parents[2]
BASE = """
[experiment]
name = "x"
problems = ["p28"]
grading = "ray"

[[models]]
name = "m"

[grading.ray]
{table}
"""


def config(table: str) -> Any:
    return parse_config(BASE.format(table=table), "exp.toml", check_problems=False)


# -- config -----------------------------------------------------------------------------------
def test_the_ray_table_is_read_and_checked() -> None:
    parsed = config('address = "ray://head:10001"\nresources = { H200 = 1 }\ngraders_per_gpu = 2')
    assert parsed.grading == "ray"
    assert parsed.grading_options["ray"]["resources"] == {"H200": 1}
    for table, message in [
        ("adress = 'auto'", r"\[grading.ray\]: unknown keys \['adress'\]"),
        ('address = "http://x"', r"\[grading.ray\].address: must be"),
        ("graders_per_gpu = 0", r"\[grading.ray\].graders_per_gpu: must be a whole number"),
        ("resources = { H200 = -1 }", r"\[grading.ray\].resources.H200: must be a positive"),
        ('grader = "fast"', r"\[grading.ray\].grader: must be one of"),
        ("simulated_s = [0.1, 0.5]", r"\[grading.ray\].simulated_s: applies to grader"),
        ('token_env = "1X"', r"\[grading.ray\].token_env: must name"),
    ]:
        with pytest.raises(ConfigError, match=message):
            config(table)


def test_the_ray_table_belongs_to_ray_grading() -> None:
    text = BASE.format(table='address = "auto"').replace('grading = "ray"', 'grading = "local"')
    with pytest.raises(ConfigError, match=r"\[grading\].ray: unknown key for local grading"):
        parse_config(text, "exp.toml", check_problems=False)


def test_without_ray_a_ray_config_is_refused_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # "import ray" now fails as if not installed
    with pytest.raises(ConfigError, match=r"needs Ray, which is not installed: .*pip install"):
        config('address = "auto"')
    backend = RayBackend(RayOptions(address="local"))
    with pytest.raises(RayUnavailable, match=r"pip install -e '\.\[ray\]'"):
        asyncio.run(backend.start())


def test_no_token_no_connection(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setattr("engine.grading.backends.ray.DEFAULT_TOKEN_PATH", tmp_path / "none")
    backend = RayBackend(RayOptions(address="10.0.0.1:6379", token_env="MKB_TEST_RAY_TOKEN"))
    with pytest.raises(RayUnavailable, match=r"token authentication is required.*MKB_TEST_RAY"):
        asyncio.run(backend.start())


def test_mkb_run_imports_no_ray() -> None:
    """Ray stays unimported by the CLI, the factory and a local run, and by the ray backend's
    own modules until it connects."""
    code = (
        "import sys\n"
        "import app.cli, app.commands.run, app.progress, engine.factory, engine.config\n"
        "import engine.grading.backends.ray, engine.grading.backends.ray_actor\n"
        "from engine.config import parse_config\n"
        "from engine.factory import make_backend\n"
        "make_backend(parse_config(sys.stdin.read(), check_problems=False))\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
        "print('ok')\n"
    )
    local = BASE.format(table="").replace('grading = "ray"', 'grading = "local"')
    local = local.replace("[grading.ray]", "")
    out = subprocess.run(
        [sys.executable, "-c", code], input=local, cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


# -- a double of Ray ------------------------------------------------------------------------
class FakeMethod:
    def __init__(self, actor: FakeActor, name: str) -> None:
        self.actor, self.name = actor, name

    def remote(self, *args: Any) -> asyncio.Future[Any]:
        return asyncio.ensure_future(self.actor.call(self.name, *args))


class FakeActor:
    """An actor whose pings can go unanswered (a lost node) and whose gradings can be held."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.incarnation = f"fake:{index}:1"
        self.quiet = False  # pings never answer (a lost node)
        self.hold: asyncio.Event | None = None  # gradings wait for it
        self.graded: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> FakeMethod:
        return FakeMethod(self, name)

    async def call(self, name: str, *args: Any) -> Any:
        if name in ("ping", "warm"):
            if self.quiet:
                await asyncio.Event().wait()
            return {"incarnation": self.incarnation, "host": "fake", "gpu_name": None}
        if name == "grade":
            key, dispatch, request = args
            self.graded.append((key, dispatch))
            if self.hold is not None:
                await self.hold.wait()
            feedback = Feedback(
                "preview", request_id=request["request_id"], message=self.incarnation
            )
            return {
                "key": key,
                "dispatch": dispatch,
                "worker": self.incarnation,
                "feedback": feedback.to_dict(),
            }
        return None


class FakeRay:
    """What the backend asks of Ray: an initialised connection, resources, actors."""

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus
        self.actors: list[FakeActor] = []

    def is_initialized(self) -> bool:
        return True

    def cluster_resources(self) -> dict[str, float]:
        return {"GPU": float(self.gpus)}

    def nodes(self) -> list[dict[str, Any]]:
        return [{"Alive": True, "Resources": {"GPU": 1.0}} for _ in range(self.gpus)]

    def remote(self, cls: Any) -> FakeRay:  # ray.remote(GraderActor)
        return self

    def options(self, **kwargs: Any) -> FakeActorClass:
        assert kwargs["max_restarts"] == -1 and kwargs["max_task_retries"] == -1
        assert kwargs["num_gpus"] == 1.0
        return FakeActorClass(self)

    def kill(self, actor: FakeActor, no_restart: bool = True) -> None:
        actor.quiet = True

    def shutdown(self) -> None:
        return None


class FakeActorClass:
    def __init__(self, ray: FakeRay) -> None:
        self.ray = ray

    def remote(self, builder: Any) -> FakeActor:
        self.ray.actors.append(FakeActor(len(self.ray.actors)))
        return self.ray.actors[-1]


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> FakeRay:
    fake = FakeRay(gpus=2)
    monkeypatch.setitem(sys.modules, "ray", fake)  # type: ignore[arg-type]
    monkeypatch.setenv("RAY_AUTH_TOKEN", "t" * 32)
    return fake


def request(n: int) -> GradeRequest:
    return GradeRequest("p28", "cute", f"# {n}\n", request_id=f"r{n}")


def fast_options(**kw: Any) -> RayOptions:
    return RayOptions(address="127.0.0.2:1", heartbeat_s=0.02, lost_after_s=0.1, **kw)


async def test_one_job_per_grader_fifo(fake_ray: FakeRay) -> None:
    backend = RayBackend(fast_options())
    await backend.start()
    hold = asyncio.Event()
    for actor in fake_ray.actors:
        actor.hold = hold
    tasks = [asyncio.create_task(backend.grade(request(n))) for n in range(5)]
    for _ in range(100):
        await asyncio.sleep(0.01)
        if backend.status()["busy"] == 2:
            break
    status = backend.status()
    assert (status["graders"], status["busy"], status["queued"]) == (2, 2, 3)
    assert all(len(a.graded) == 1 for a in fake_ray.actors)  # one job per grader at a time
    hold.set()
    results = await asyncio.gather(*tasks)
    assert [r.request_id for r in results] == [f"r{n}" for n in range(5)]
    assert backend.status()["completed"] == 5 and backend.status()["duplicates"] == 0
    await backend.close()


async def test_a_quiet_grader_loses_its_job_and_its_late_result_is_a_duplicate(
    fake_ray: FakeRay,
) -> None:
    seen: list[Duplicate] = []
    backend = RayBackend(fast_options(), duplicate_sink=seen.append)
    await backend.start()
    first, second = fake_ray.actors
    first.hold, second.hold = asyncio.Event(), asyncio.Event()
    second.hold.set()
    await asyncio.sleep(0.05)  # both lanes up
    token = JOB_KEY.set("job-7")
    job = asyncio.create_task(backend.grade(request(1)))
    JOB_KEY.reset(token)
    for _ in range(100):
        await asyncio.sleep(0.01)
        if first.graded or second.graded:
            break
    holder, other = (first, second) if first.graded else (second, first)
    holder.hold = holder.hold or asyncio.Event()
    holder.quiet = True  # its node is lost: pings go unanswered, the call hangs
    feedback = await asyncio.wait_for(job, 5)
    assert feedback.message == other.incarnation  # graded by the other grader
    assert [k for k, _ in other.graded] == ["job-7"] and other.graded[0][1] == 2
    assert backend.status()["requeued"] == 1 and backend.status()["up"] == 1
    holder.quiet = False
    assert holder.hold is not None
    holder.hold.set()  # the lost call comes back after all (Ray's retry): a duplicate
    for _ in range(200):
        await asyncio.sleep(0.01)
        if seen:
            break
    assert [(d.key, d.dispatch, d.delivered_dispatch) for d in seen] == [("job-7", 1, 2)]
    assert backend.status()["duplicates"] == 1 and backend.status()["completed"] == 1
    await backend.close()


async def test_a_job_that_keeps_losing_its_grader_ends_as_an_infrastructure_error(
    fake_ray: FakeRay,
) -> None:
    backend = RayBackend(fast_options(max_dispatches=2))
    await backend.start()
    await asyncio.sleep(0.05)
    for actor in fake_ray.actors:  # every grader goes quiet under the job
        actor.hold = asyncio.Event()
    job = asyncio.create_task(backend.grade(request(1)))
    for _ in range(100):
        await asyncio.sleep(0.01)
        if any(a.graded for a in fake_ray.actors):
            break
    for actor in fake_ray.actors:
        if actor.graded:
            actor.quiet = True
    for _ in range(200):
        await asyncio.sleep(0.01)
        if sum(len(a.graded) for a in fake_ray.actors) == 2:
            break
    for actor in fake_ray.actors:
        actor.quiet = True
    fake_ray.actors.append(FakeActor(9))  # nobody left who answers: the job must still end
    feedback = await asyncio.wait_for(job, 5)
    assert (feedback.verdict, feedback.reason) == ("error", "crash")
    assert "lost 2 times" in feedback.message
    await backend.close()


# -- the ledger and the store ---------------------------------------------------------------
async def test_ledger_keeps_the_first_result_only() -> None:
    ledger = JobLedger()
    assert ledger.dispatch("a") == 1 and ledger.dispatch("a") == 2
    assert await ledger.deliver("a", 2, "w2", Feedback("preview"))
    assert not await ledger.deliver("a", 1, "w1", Feedback("fail"))
    assert ledger.delivered == 1
    assert [(d.dispatch, d.worker, d.verdict) for d in ledger.duplicates] == [(1, "w1", "fail")]


class DuplicatingBackend:
    """Grades, and then reports a duplicate of the job it just graded."""

    name = "dup"

    def __init__(self) -> None:
        self.sink: Any = None
        self.keys: list[str | None] = []

    def attach_duplicate_sink(self, sink: Any) -> None:
        self.sink = sink

    async def grade(self, request: GradeRequest) -> Feedback:
        self.keys.append(JOB_KEY.get())
        return Feedback("preview", request_id=request.request_id, impl_median_ms=1.0)

    async def close(self) -> None:
        return None


class Wrapper:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    async def grade(self, request: GradeRequest) -> Feedback:
        return await self.inner.grade(request)  # type: ignore[no-any-return]

    async def close(self) -> None:
        return None


async def test_the_store_keys_jobs_and_records_duplicates(db_path: Path) -> None:
    inner = DuplicatingBackend()
    with Store(db_path) as store:
        exp = "e"
        store.write_sync(writes.create_experiment, exp, exp)
        attempt = store.write_sync(
            writes.ensure_attempt,
            exp,
            "k",
            model="m",
            problem_id="p28",
            family="f",
            dsl="cute",
            arm="solo_cute",
            replicate=1,
        )
        recording = RecordingBackend(
            Wrapper(inner),  # the engine wraps its backend (final repeats count gradings)
            Publisher(store, EventBus()),
            experiment_id=exp,
            attempt_id=attempt,
            try_number=1,
        )
        feedback = await recording.grade(request(1))
        assert feedback.verdict == "preview"
        job_id = store.read_sync(lambda db: db.execute("SELECT id FROM grading_jobs").fetchone()[0])
        assert inner.keys == [str(job_id)]  # the backend's ledger key is the store's job id
        await inner.sink(Duplicate(str(job_id), 1, "w1", "preview", 2))
        rows = store.read_sync(
            lambda db: db.execute(
                "SELECT payload_json FROM events WHERE kind='grading_duplicate'"
            ).fetchall()
        )
        done = store.read_sync(
            lambda db: db.execute(
                "SELECT count(*) FROM grading_jobs WHERE state='done'"
            ).fetchone()[0]
        )
    assert len(rows) == 1 and f'"job_id": "{job_id}"' in rows[0][0]
    assert done == 1  # the duplicate changed no result


def test_ray_status_line() -> None:
    status = RayStatus.from_status(
        "e",
        {
            "nodes": 4,
            "gpus": 4.0,
            "graders": 4,
            "up": 3,
            "busy": 2,
            "queued": 5,
            "restarts": 1,
            "requeued": 2,
            "duplicates": 1,
            "address": "x",
        },
    )
    assert status.summary == (
        "2/4 graders busy (3 up), 5 queued, 4 nodes, 4 GPUs, 1 restarts, 2 requeued, "
        "1 duplicates dropped"
    )


def test_the_progress_display_shows_the_cluster() -> None:
    from app.progress import ProgressDisplay

    bus = EventBus()
    display = ProgressDisplay(bus, total=4, title="x")
    bus.notify(RayStatus("e", nodes=3, gpus=3.0, graders=4, up=3, busy=3, restarts=1))
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(display.render())
    text = console.export_text()
    assert "ray cluster" in text and "3/4 graders busy (3 up)" in text and "1 restarts" in text
