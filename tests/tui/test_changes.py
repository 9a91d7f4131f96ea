"""Coalescing engine events into change sets."""

from __future__ import annotations

from screens.base import ChangeCollector, Changes


def test_collector_coalesces_a_burst_into_one_change_set() -> None:
    collector = ChangeCollector()
    assert not collector.dirty
    for i in range(500):
        collector.add("step_recorded", i % 3 + 1)
    collector.add("comparison_updated", None)
    assert collector.dirty and collector.events_seen == 501
    changes = collector.take()
    assert changes.attempt_ids == frozenset({1, 2, 3})
    assert changes.attempts and changes.comparisons and not changes.labels
    assert changes.touches(2) and not changes.touches(4)
    assert not collector.dirty and collector.take() == Changes()


def test_everything_touches_every_view() -> None:
    collector = ChangeCollector()
    collector.mark_everything()
    changes = collector.take()
    assert changes.attempts and changes.comparisons and changes.labels and changes.experiments
    assert changes.touches(12345)
    label = Changes(kinds=frozenset({"label_added"}))
    assert label.labels and not label.attempts and not label.comparisons
