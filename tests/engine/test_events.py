"""The typed event catalogue: one publish stores the row and then notifies; readers match kinds."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.events import (
    KINDS,
    Area,
    AttemptNote,
    AttemptStarted,
    EnginePaused,
    Event,
    EventBus,
    Publisher,
    SkillUpdated,
    StepRecorded,
    area_of,
)
from storage import queries, writes
from storage.store import Store


def _attempt(store: Store) -> int:
    def setup(db) -> int:  # type: ignore[no-untyped-def]
        writes.create_experiment(db, "exp", "exp")
        return writes.ensure_attempt(
            db, "exp", "k1", model="m", problem_id="p28", dsl="cute", arm="solo_cute", replicate=1
        )

    return store.write_sync(setup)


async def test_publish_commits_the_row_before_any_reader_hears_of_it(db_path: Path) -> None:
    with Store(db_path) as store:
        attempt_id = _attempt(store)
        bus = EventBus()
        seen: list[tuple[str, list[str]]] = []

        def reader(event: Event) -> None:  # a live reader re-reads the store at once
            rows = store.read_sync(queries.events_after, 0, limit=1000)
            seen.append((event.kind, [r.kind for r in rows]))

        bus.subscribe(reader)
        publisher = Publisher(store, bus)
        await publisher.publish(
            AttemptStarted("exp", attempt_id, key="k1"),
            writes.update_attempt,
            attempt_id,
            state="running",
            tries=1,
        )
        ((kind, stored),) = seen
        assert kind == "attempt_started" and stored[-1] == "attempt_started"
        row = store.read_sync(queries.attempt, attempt_id)
        assert row is not None and row.state == "running" and row.tries == 1
        last = store.read_sync(queries.events_after, 0, limit=1000)[-1]
        assert last.attempt_id == attempt_id and last.payload == {"key": "k1", "try_number": 1}


async def test_a_row_written_by_storage_is_written_once(db_path: Path) -> None:
    with Store(db_path) as store:
        attempt_id = _attempt(store)
        publisher = Publisher(store, EventBus())
        await publisher.publish(
            StepRecorded("exp", attempt_id, step_index=1), writes.add_step, attempt_id, 1
        )
        await publisher.publish(
            SkillUpdated("exp", attempt_id, chars=3), writes.add_skill, "abc", attempt_id=attempt_id
        )
        kinds = [r.kind for r in store.read_sync(queries.events_after, 0, limit=1000)]
        assert kinds.count("step_recorded") == 1 and kinds.count("skill_updated") == 1
        with pytest.raises(TypeError):  # its row comes with the data: no write, no event
            await publisher.publish(StepRecorded("exp", attempt_id, step_index=2))


async def test_a_failed_write_publishes_nothing(db_path: Path) -> None:
    with Store(db_path) as store:
        attempt_id = _attempt(store)
        heard: list[Event] = []
        bus = EventBus()
        bus.subscribe(heard.append)
        before = len(store.read_sync(queries.events_after, 0, limit=1000))
        with pytest.raises(ValueError):
            await Publisher(store, bus).publish(
                AttemptStarted("exp", attempt_id),
                writes.update_attempt,
                attempt_id,
                plan_key="hijack",
            )
        assert heard == [] and len(store.read_sync(queries.events_after, 0, limit=1000)) == before


async def test_live_events_store_nothing_and_stored_ones_refuse_notify(db_path: Path) -> None:
    with Store(db_path) as store:
        heard: list[Event] = []
        bus = EventBus()
        bus.subscribe(heard.append)
        publisher = Publisher(store, bus)
        before = len(store.read_sync(queries.events_after, 0, limit=1000))
        publisher.notify(EnginePaused("exp"))
        await publisher.publish(EnginePaused("exp"))
        assert [e.kind for e in heard] == ["engine_paused", "engine_paused"]
        assert len(store.read_sync(queries.events_after, 0, limit=1000)) == before
        with pytest.raises(TypeError):
            publisher.notify(AttemptStarted("exp", 1))


def test_readers_match_on_kinds_through_the_catalogue() -> None:
    assert area_of("step_recorded") is Area.ATTEMPTS
    assert area_of("attempt.try_finished") is Area.ATTEMPTS  # a runner's note
    assert area_of("comparison_updated") is Area.COMPARISONS
    assert area_of("label_added") is Area.LABELS  # written by storage only
    assert area_of("experiment_state") is Area.EXPERIMENTS
    assert area_of("engine_paused") is Area.ENGINE
    assert area_of("attemptive") is None and area_of("experimental") is None  # no prefixes
    note = AttemptNote("exp", 3, name="try_started", report={"try": 1})
    assert note.kind == "attempt.try_started" and note.data == {"try": 1}
    assert all(name == cls.KIND for name, cls in KINDS.items())


def test_as_dict_keeps_the_json_stream_shape() -> None:
    event = StepRecorded("exp", 4, step_index=7)
    assert event.as_dict() == {
        "kind": "step_recorded",
        "experiment_id": "exp",
        "attempt_id": 4,
        "data": {"step_index": 7},
    }
