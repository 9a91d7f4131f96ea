"""Paired comparisons read from a real store (storage/paired_repeats.py) and decided per clock
(engine/analysis/paired_lift.py): help beyond noise from interleaved pairs on one slot,
cross-host and unpaired comparisons never called, the clocks' disagreement said, and
`mkb analyze` (text and --json) showing it all."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from engine.analysis.noise import Series
from engine.analysis.paired_lift import adaptive_max, paired_calls, paired_report
from engine.analysis.sequential import look_weight
from storage import writes
from storage.db import open_db
from storage.event_rows import text_hash
from storage.paired_repeats import PairedComparison, PairedGrading, comparison_pairs


def _comparison(db: Any, problem: str, replicate: int) -> int:
    writes.upsert_comparison(
        db,
        "e",
        model="m",
        problem_id=problem,
        direction="cute->tirx",
        replicate=replicate,
        resolved=1,
        rho=1.0,
        verdict="help",
    )
    row = db.execute(
        "SELECT id FROM comparisons WHERE problem_id=? AND replicate=?", [problem, replicate]
    ).fetchone()
    return int(row[0])


def _job(
    db: Any,
    cid: int,
    problem: str,
    base: list[tuple[float, float]],
    treat: list[tuple[float, float]],
    slots: tuple[str, str] = ("n1:gpu0", "n1:gpu0"),
) -> None:
    """One paired job as the engine stores it: A B B A … interleaved, (e2e, span) per row."""
    order = [("baseline", "treatment")[(i + i // 2) % 2] for i in range(2 * len(base))]
    left = {"baseline": list(base), "treatment": list(treat)}
    for position, arm in enumerate(order, 1):
        e2e, span = left[arm].pop(0)
        slot = slots[0] if arm == "baseline" else slots[1]
        db.execute(
            "INSERT INTO timing_repeats (series, repeat, kind, experiment_id, problem_id, dsl, "
            "source_hash, host, state, verdict, impl_median_ms, started_at, pair_key, arm, slot, "
            "span_ms) VALUES (?, ?, 'final', 'e', ?, 'tirx', ?, ?, 'done', 'pass', ?, 'now', ?, "
            "?, ?, ?)",
            [
                f"pair:e:{cid}:{arm}",
                position,
                problem,
                text_hash(arm),
                slot.split(":")[0],
                e2e,
                f"pair:e:{cid}",
                arm,
                slot,
                span,
            ],
        )


def _noise(db: Any, problem: str, sigma: float, rng: random.Random) -> None:
    """A/A series of the problem on n1 (the band's prior): 6 files × 4 gradings."""
    for f in range(6):
        for k in range(1, 5):
            db.execute(
                "INSERT INTO timing_repeats (series, repeat, kind, problem_id, dsl, source_hash, "
                "host, state, verdict, impl_median_ms, started_at) VALUES (?, ?, 'noise', ?, "
                "'tirx', 'x', 'n1', 'done', 'pass', ?, 'now')",
                [f"noise:{problem}{f}", k, problem, math.exp(rng.gauss(0, sigma))],
            )


def _arm(rng: random.Random, scale: float, sigma: float, span_sigma: float, k: int = 5):  # noqa: ANN202
    return [
        (scale * math.exp(rng.gauss(0, sigma)), scale * math.exp(rng.gauss(0, span_sigma)))
        for _ in range(k)
    ]


@pytest.fixture
def store(db_path: Path) -> Any:
    rng = random.Random(42)
    db = open_db(db_path)
    writes.create_experiment(db, "e", "e")
    for problem, sigma in (("p01", 0.03), ("p02", 0.03), ("p03", 0.03), ("p04", 0.15)):
        _noise(db, problem, sigma, rng)
    # p01: a 1.3× help on both clocks; p02: null; p03: a 1.3× help graded on two slots;
    # p04: a 1.1× help, clear on the quiet span, within noise on a noisy (CV 15 %) end to end
    _job(
        db, _comparison(db, "p01", 1), "p01", _arm(rng, 1.3, 0.03, 0.003), _arm(rng, 1, 0.03, 0.003)
    )
    _job(db, _comparison(db, "p02", 1), "p02", _arm(rng, 1, 0.03, 0.003), _arm(rng, 1, 0.03, 0.003))
    _job(
        db,
        _comparison(db, "p03", 1),
        "p03",
        _arm(rng, 1.3, 0.03, 0.003),
        _arm(rng, 1, 0.03, 0.003),
        slots=("n1:gpu0", "n2:gpu0"),
    )
    _job(
        db, _comparison(db, "p04", 1), "p04", _arm(rng, 1.1, 0.15, 0.003), _arm(rng, 1, 0.15, 0.003)
    )
    _comparison(db, "p05", 1)  # resolved, never paired
    yield db
    db.conn.close()


def test_the_reader_pairs_the_ith_rows_of_each_arm(store: Any) -> None:
    comps = comparison_pairs(store, "e")
    assert [c.problem_id for c in comps] == ["p01", "p02", "p03", "p04"]
    first = comps[0]
    assert len(first.pairs) == 5 and [g.repeat for g in first.baseline] == [1, 4, 5, 8, 9]
    assert {g.slot for g in first.treatment} == {"n1:gpu0"}


def test_calls_per_clock_with_cross_host_and_unpaired_never_called(store: Any) -> None:
    report = paired_report(store, "e")
    rows = {r["problem"]: r for r in report["comparisons"]}
    assert rows["p01"]["status"] == "paired" and rows["p01"]["call"] == "help"
    e2e = rows["p01"]["clocks"]["e2e"]
    assert e2e["rho_low"] > 1.1 and e2e["q"] <= 0.05 and e2e["prior"]  # the band entered
    assert rows["p02"]["call"] == "within"
    assert rows["p03"]["status"] == "cross_host" and rows["p03"]["call"] == "cross_host"
    assert rows["p03"]["clocks"]["span"]["call"] == "cross_host"  # ρ 1.3, yet never called
    assert rows["p05"]["status"] == "unpaired" and rows["p05"]["pairs"] == 0
    p04 = rows["p04"]
    assert p04["clocks"]["span"]["call"] == "help" and p04["clocks"]["e2e"]["call"] == "within"
    assert p04["clocks_disagree"] and "clocks disagree" in p04["note"]
    assert report["power"] is not None and report["power"]["pairs"] == 5
    assert report["power"]["detect"]["0.3"] > report["power"]["detect"]["0.1"]


def test_mkb_analyze_shows_paired_calls_in_text_and_json(
    store: Any, db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import main

    store.conn.commit()
    assert main(["analyze", "--db", str(db_path), "--experiment", "e", "--draws", "20"]) == 0
    out = capsys.readouterr().out
    section = out[out.index("Paired comparisons") :]
    assert "cross_host" in section and "unpaired" in section and "clocks disagree" in section
    assert "per comparison: at the bands in use a 1.1x help is called" in section
    assert (
        main(["analyze", "--db", str(db_path), "--experiment", "e", "--json", "--draws", "20"]) == 0
    )
    paired = json.loads(capsys.readouterr().out)["paired"]
    calls = {r["problem"]: r["call"] for r in paired["comparisons"]}
    assert calls == {
        "p01": "help",
        "p02": "within",
        "p03": "cross_host",
        "p04": "within",
        "p05": "unpaired",
    }


def test_an_adaptive_experiment_takes_and_says_the_sequential_p(
    store: Any, db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The design is the stored config's: with ``paired_repeats = "adaptive"`` every paired
    comparison's q comes from its sequential p, and `mkb analyze` says so (text and JSON)."""
    from app.cli import main

    config = '[experiment]\nname = "e"\n\n[grading]\npaired_repeats = "adaptive"\npaired_max = 5\n'
    store.execute("UPDATE experiments SET config_toml = ? WHERE id = 'e'", [config])
    store.conn.commit()
    args = ["analyze", "--db", str(db_path), "--experiment", "e", "--draws", "20"]
    assert main(args) == 0
    assert "adaptive jobs (up to 5 pairs): q from each comparison's sequential p" in (
        capsys.readouterr().out
    )
    assert main([*args, "--json"]) == 0
    paired = json.loads(capsys.readouterr().out)["paired"]
    assert paired["adaptive_max"] == 5
    p01 = next(r for r in paired["comparisons"] if r["problem"] == "p01")["clocks"]["e2e"]
    assert p01["sequential_p"] is not None and p01["sequential_p"] >= p01["p"]


def test_slow_gradings_are_rejected_and_shown_by_mkb_analyze(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A null comparison whose baseline ran 2x slow in 2 of its 3 gradings: the old rule
    (differences against their median) called it help; now both gradings are rejected, the
    clean pair is tested (within) and the count shows in the text and the JSON."""
    from app.cli import main

    rng = random.Random(3)
    db = open_db(db_path)
    writes.create_experiment(db, "e", "e")
    _noise(db, "p01", 0.03, rng)
    base = [(1.0, 1.0), (2.01, 1.0), (1.99, 1.0)]  # end to end slowed; the span is not
    _job(db, _comparison(db, "p01", 1), "p01", base, [(1.01, 1.0), (0.99, 1.0), (1.0, 1.0)])
    db.conn.commit()
    db.conn.close()
    assert main(["analyze", "--db", str(db_path), "--experiment", "e", "--json"]) == 0
    paired = json.loads(capsys.readouterr().out)["paired"]
    e2e = paired["comparisons"][0]["clocks"]["e2e"]
    assert e2e["call"] == "within" and e2e["k"] == 1
    assert (e2e["rejected_gradings"], e2e["dropped_pairs"], e2e["outlier_basis"]) == (2, 2, "band")
    assert paired["outliers"]["e2e"] == {
        "rejected_gradings": 2,
        "dropped_pairs": 2,
        "comparisons": 1,
    }
    assert paired["outliers"]["span"]["rejected_gradings"] == 0
    assert main(["analyze", "--db", str(db_path), "--experiment", "e"]) == 0
    out = capsys.readouterr().out
    assert "end to end: 2 grading(s) rejected as outliers (2 pair(s) dropped" in out
    assert "outliers (end to end): 2 grading(s) rejected, 2 pair(s) dropped" in out


def test_an_arms_solo_final_is_a_reference_for_its_gradings(db_path: Path) -> None:
    """Both treatment gradings of a 2-pair null comparison 2x slow: the treatment file's own
    unpaired final on the same host reads normal, so both are rejected (no call)."""
    rng = random.Random(5)
    db = open_db(db_path)
    writes.create_experiment(db, "e", "e")
    _noise(db, "p01", 0.03, rng)
    cid = _comparison(db, "p01", 1)
    _job(db, cid, "p01", [(0.50, 0.5), (0.49, 0.5)], [(0.97, 0.5), (0.98, 0.5)])
    assert paired_report(db, "e")["comparisons"][0]["call"] == "harm"  # nothing else to go on
    db.execute(
        "INSERT INTO timing_repeats (series, repeat, kind, experiment_id, problem_id, dsl, "
        "source_hash, host, state, verdict, impl_median_ms, started_at) VALUES ('solo', 1, "
        "'final', 'e', 'p01', 'tirx', ?, 'n1', 'done', 'pass', 0.5, 'now')",
        [text_hash("treatment")],
    )
    e2e = paired_report(db, "e")["comparisons"][0]["clocks"]["e2e"]
    assert (e2e["call"], e2e["rejected_gradings"], e2e["dropped_pairs"]) == ("untested", 2, 2)
    db.conn.close()


BAND = [  # (p01, tirx, n1): 6 series of 4 gradings, σ ≈ 0.03
    Series("p01", "n1", tuple(math.exp(0.03 * z) for z in (-1.2, 0.4, 1.1, -0.3)), f"n:{i}", "tirx")
    for i in range(6)
]


def _pairs(log_rho: float) -> PairedComparison:
    """Five pairs on one slot whose differences are ``log_rho`` plus a fixed wiggle."""
    wiggle = (0.02, -0.015, 0.01, -0.02, 0.005)
    arms = {"baseline": [math.exp(log_rho + w) for w in wiggle], "treatment": [1.0] * 5}
    graded = {
        arm: tuple(
            PairedGrading(f"pair:e:1:{arm}", i, "tirx", "n1", "n1:gpu0", "pass", v, None, arm)
            for i, v in enumerate(values)
        )
        for arm, values in arms.items()
    }
    return PairedComparison(1, "m", "p01", "cute->tirx", 1, graded["baseline"], graded["treatment"])


def test_an_adaptive_design_gives_bh_the_sequential_p() -> None:
    """A job that may stop at any look is judged by the sequence's p (min_k p_k / w_k, valid
    under optional stopping), not the last look's plain p: p = 0.03 at the 5th pair is help
    beyond noise with k fixed at 5, within noise when the job could have stopped earlier."""
    fixed = paired_calls([_pairs(0.04)], {"e2e": BAND})[0]["clocks"]["e2e"]
    assert 0.0216 < fixed["p"] < 0.05 and fixed["call"] == "help"  # 0.0216: α · w_5
    assert fixed["sequential_p"] is None and fixed["q"] == fixed["p"]
    adaptive = paired_calls([_pairs(0.04)], {"e2e": BAND}, adaptive_max=5)[0]["clocks"]["e2e"]
    assert adaptive["p"] == fixed["p"]  # the estimate and its plain p are shown unchanged
    assert adaptive["q"] == adaptive["sequential_p"] >= fixed["p"] / look_weight(5, 5)
    assert adaptive["call"] == "within"
    clear = paired_calls([_pairs(0.3)], {"e2e": BAND}, adaptive_max=5)[0]
    assert clear["call"] == "help"


def test_an_adaptive_job_left_with_one_pair_by_an_outlier_is_its_first_look() -> None:
    """A job stopped at two pairs, one of which lost a 2× grading: one pair is left, too few
    for a look; with a band it is tested as the first look (p over that look's share of α),
    not left untested (through the engine that missed 1.3× helps at CV 3 %)."""
    arms = {"baseline": [1.35, 2 * 1.35], "treatment": [1.0, 1.0]}
    graded = {
        arm: tuple(
            PairedGrading(f"pair:e:1:{arm}", i, "tirx", "n1", "n1:gpu0", "pass", v, None, arm)
            for i, v in enumerate(values)
        )
        for arm, values in arms.items()
    }
    comp = PairedComparison(1, "m", "p01", "cute->tirx", 1, graded["baseline"], graded["treatment"])
    row = paired_calls([comp], {"e2e": BAND}, adaptive_max=5)[0]["clocks"]["e2e"]
    assert row["k"] == 1 and row["dropped_pairs"] == 1 and row["p"] is not None
    assert row["sequential_p"] == pytest.approx(row["p"] / look_weight(2, 5))
    assert row["call"] == "help"


@pytest.mark.parametrize(
    ("grading", "expected"),
    [
        ('paired_repeats = "adaptive"\npaired_max = 6', 6),
        ('paired_repeats = "adaptive"', 10),  # the config's default maximum
        ("paired_repeats = 5", None),
        ("", None),
    ],
)
def test_the_design_is_read_from_the_stored_config(grading: str, expected: int | None) -> None:
    assert adaptive_max(f'[experiment]\nname = "e"\n\n[grading]\n{grading}\n') == expected
    assert adaptive_max("not [ toml") is None


def _synthetic(cid: int, base: list[float], treat: list[float]) -> PairedComparison:
    """A comparison of one slot with its arms' series named as the store names them."""
    arms = []
    for arm, values in (("baseline", base), ("treatment", treat)):
        key = f"pair:e:{cid}:{arm}"
        arms.append(
            tuple(
                PairedGrading(key, i, "tirx", "h", "h:gpu0", "pass", v, None)
                for i, v in enumerate(values)
            )
        )
    return PairedComparison(cid, "m", "p01", "cute->tirx", cid, arms[0], arms[1])


def test_a_comparison_is_never_shrunk_toward_its_own_series() -> None:
    # its own two series alone would make a 4-dof band: counted twice, its σ would lend it
    # dof it does not have (an anti-conservative t); only other comparisons' series may
    mine = _synthetic(1, [1.0, 1.2, 0.9], [1.1, 0.95, 1.05])
    own = [
        Series("p01", "h", tuple(g.impl_median_ms or 0.0 for g in arm), arm[0].series, "tirx")
        for arm in (mine.baseline, mine.treatment)
    ]
    alone = paired_calls([mine], {"e2e": own, "span": []})[0]["clocks"]["e2e"]
    assert (alone["prior"], alone["dof"]) == (False, 2)
    other = _synthetic(2, [1.0, 1.1, 0.95], [1.0, 1.05, 0.9])
    theirs = [
        Series("p01", "h", tuple(g.impl_median_ms or 0.0 for g in arm), arm[0].series, "tirx")
        for arm in (other.baseline, other.treatment)
    ]
    lent = paired_calls([mine], {"e2e": own + theirs, "span": []})[0]["clocks"]["e2e"]
    assert (lent["prior"], lent["dof"]) == (True, 4 + 2)  # the other's 4 dof, its own 2


def test_a_pair_split_over_two_machines_is_left_out_and_counted() -> None:
    """A paired job cut at a device call's limit and resumed on the next machine: its last
    pair's treatment ran on a faster machine of the same host name (2026-12-07, one H100).
    The test takes the four pairs of one slot only, and the row says one was left out."""
    base = [1.00, 1.02, 0.99, 1.01, 1.00]
    treat = [1.01, 1.00, 1.00, 1.02, 0.80]  # the fifth on the other machine, 20 % faster
    comp = _synthetic(1, base, treat)
    moved = comp.treatment[4].__class__(
        **{**comp.treatment[4].__dict__, "slot": "vm#77e01b2d:gpu0"}
    )
    comp = PairedComparison(
        1, "m", "p01", "cute->tirx", 1, comp.baseline, (*comp.treatment[:4], moved)
    )
    row = paired_calls([comp], {"e2e": BAND})[0]
    assert row["status"] == "paired" and row["split_pairs"] == 1 and row["pairs"] == 5
    assert row["clocks"]["e2e"]["k"] == 4 and row["call"] == "within"
    assert "1 pair(s) split over two slots left out" in row["note"]
    every = _synthetic(1, base, treat)  # all five on one slot: the moved pair would count
    assert paired_calls([every], {"e2e": BAND})[0]["clocks"]["e2e"]["k"] == 5


def test_a_comparison_with_no_pair_on_one_slot_is_cross_host() -> None:
    comp = _synthetic(1, [1.0, 1.0, 1.0], [0.7, 0.7, 0.7])
    moved = tuple(g.__class__(**{**g.__dict__, "slot": "vm#77e01b2d:gpu0"}) for g in comp.treatment)
    row = paired_calls(
        [PairedComparison(1, "m", "p01", "cute->tirx", 1, comp.baseline, moved)], {"e2e": BAND}
    )[0]
    assert row["status"] == "cross_host" and row["call"] == "cross_host" and row["split_pairs"] == 3


def test_a_call_from_its_own_pairs_alone_says_so() -> None:
    """A help called with no band of other series beside it rests on its own k − 1 dof (the
    p28 tirx→cute call on the H100, 2026-12-07): the row says so; with a band it does not."""
    alone = paired_calls([_pairs(0.3)], {"e2e": [], "span": []})[0]
    assert alone["call"] == "help" and not alone["clocks"]["e2e"]["prior"]
    assert "end to end: help from its own 5 pairs alone (4 dof" in alone["note"]
    lent = paired_calls([_pairs(0.3)], {"e2e": BAND, "span": []})[0]
    assert lent["call"] == "help" and lent["clocks"]["e2e"]["prior"]
    assert "alone" not in lent["note"]
