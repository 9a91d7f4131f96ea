"""The Experiments and Compare views: `e` lists the store's experiments, `c` on one with a
re-grade opens the two side by side (agreement, changed verdicts, where each side was graded),
the picker sets another side; the view shows the comparison `mkb analyze --compare` prints.

The store is real: the bundle tests' graded experiment (CPU-preview verdicts), exported and
re-graded through `mkb bundle export` and `mkb regrade`, with only this host's grader stood in
for (a GPU that fails the TIRx implementations, so two verdicts change)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import plain, wait_until
from textual.widgets import DataTable, Static

from app.cli import main
from engine.grading.api import Feedback, GradeRequest
from screens.compare import CompareScreen
from screens.experiment_picker import ExperimentPicker
from screens.experiments import ExperimentsScreen
from storage.db import open_db

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bundle"))
import bundle_support  # noqa: E402

GPU = "NVIDIA H200 (stand-in)"
HOSTILE = "evil\x1b]0;pwned\x07\x1b[2J name"


class StandInGrader:
    """This host's grader for the test: every implementation passes on a GPU except the
    TIRx ones, which fail correctness."""

    name = "stand-in"

    async def grade(self, request: GradeRequest) -> Feedback:
        common: dict[str, Any] = {"problem_id": request.problem_id, "dsl": request.dsl}
        if request.dsl == "tirx":
            return Feedback("fail", "correctness.tolerance", device=GPU, **common)
        return Feedback(
            "pass", device=GPU, speedup=1.5, impl_median_ms=0.5, eager_median_ms=0.75, **common
        )

    async def close(self) -> None:
        return None


@pytest.fixture(scope="module")
def compare_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """bt (CPU preview), its re-grade here (the stand-in GPU) and an unrelated experiment
    with a hostile name; returns the store and the re-grade's id."""
    root = tmp_path_factory.mktemp("compare")
    db, bundle = root / "store.sqlite", root / "bt.mkb"
    bundle_support.build_store(db)
    assert main(["bundle", "export", "bt", "--db", str(db), "--out", str(bundle)]) == 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("app.commands.regrade._backend", lambda *a: StandInGrader())
        assert main(["regrade", str(bundle), "--db", str(db), "--device", "cpu"]) == 1
    bundle_support.build_store(db, experiment_id="other", name=HOSTILE, wrong_arm="solo_cute")
    store = open_db(db, readonly=True)
    row = store.execute("SELECT id FROM experiments WHERE id LIKE 'bt-regrade-%'").fetchone()
    store.conn.close()
    return db, str(row[0])


@pytest.fixture
def compare_db(compare_template: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    target = tmp_path / "compare.sqlite"
    shutil.copy(compare_template[0], target)
    return target, compare_template[1]


def table_text(table: DataTable[Any]) -> str:
    return "\n".join(
        " | ".join(plain(cell).strip() for cell in table.get_row_at(i))
        for i in range(table.row_count)
    )


async def _loaded(app: Any, pilot: Any, a: str, b: str) -> CompareScreen:
    await wait_until(
        pilot,
        lambda: (
            isinstance(app.screen, CompareScreen)
            and app.screen.report is not None
            and (app.screen.a, app.screen.b) == (a, b)
            and app.screen.report["a"]["id"] == a
            and app.screen.report["b"]["id"] == b
        ),
        timeout=30,
    )
    return app.screen  # type: ignore[no-any-return]


def _move_to(table: DataTable[Any], entries: list[dict[str, Any]], experiment_id: str) -> None:
    table.move_cursor(row=[e["id"] for e in entries].index(experiment_id))


async def test_c_on_an_experiment_with_a_regrade_opens_the_comparison(
    make_app: Any, compare_db: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, regrade = compare_db
    app = make_app(db_path=db)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("e")
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, ExperimentsScreen) and len(app.screen.entries) == 3,
        )
        screen = app.screen
        listing = table_text(screen.query_one(DataTable))
        assert "re-grade of bt (bundle" in listing and "PREVIEW cpu (preview)" in listing
        assert regrade in listing and GPU in listing
        _move_to(screen.query_one(DataTable), screen.entries, "bt")
        await pilot.press("c")
        view = await _loaded(app, pilot, "bt", regrade)
        head = plain(view.query_one("#compare-header", Static))
        assert "A  bt (bundle-test) · run in this store · graded on cpu (preview)" in head
        assert f"B  {regrade}" in head and "re-grade of bt" in head and GPU in head
        assert "PREVIEW" in head and "NOT COMPARABLE: A was graded in CPU preview" in head
        summary = plain(view.query_one("#compare-summary", Static))
        assert "Verdicts: 2 of 4 agree (50.0%)" in summary and "2 changed" in summary
        verdicts = table_text(view.query_one("#compare-verdicts-table", DataTable))
        changed = [line for line in verdicts.splitlines() if "solo_tirx" in line]
        assert changed and "preview" in changed[0] and "fail" in changed[0]
        assert "correctness.tolerance" in changed[0]
        assert "solo_cute" not in verdicts  # agreed verdicts are not listed

        shown = view.report

        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentsScreen))
        _move_to(screen.query_one(DataTable), screen.entries, regrade)
        await pilot.press("enter")  # the views show the re-grade
        await wait_until(pilot, lambda: app.experiment_id == regrade)

    # one comparison, two renderers: the CLI's figures are the view's (Textual holds stdout
    # while the App runs, so the CLI runs after it)
    capsys.readouterr()
    args = ["analyze", "--db", str(db), "--compare", "bt", regrade, "--draws", "200"]
    assert main([*args, "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert shown is not None and cli["verdicts"] == shown["verdicts"]
    assert cli["devices_note"] == shown["devices_note"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "Verdicts: 2 of 4 agree (50.0%)" in text
    assert "A preview (-) -> B fail (correctness.tolerance)" in text


@pytest.mark.slow  # 3.5 s idle, 8 s on the busy 2-core machine (three comparisons)
async def test_the_picker_sets_another_side_and_names_stay_clean(
    make_app: Any, compare_db: tuple[Path, str]
) -> None:
    db, regrade = compare_db
    app = make_app(db_path=db)
    async with app.run_test(size=(160, 40)) as pilot:
        app.push_screen(CompareScreen("bt", regrade))
        view = await _loaded(app, pilot, "bt", regrade)
        await pilot.press("b")
        await wait_until(
            pilot, lambda: isinstance(app.screen, ExperimentPicker) and app.screen.entries
        )
        picker = app.screen
        assert "bt" not in [e["id"] for e in picker.entries]  # side A is not offered
        _move_to(picker.query_one(DataTable), picker.entries, "other")
        await pilot.press("enter")
        await _loaded(app, pilot, "bt", "other")
        head = plain(view.query_one("#compare-header", Static))
        assert "B  other (evil" in head and "\x1b" not in head and "\x07" not in head
        assert "NOT COMPARABLE" not in head  # both CPU preview on one device
        summary = plain(view.query_one("#compare-summary", Static))
        assert "Verdicts: 3 of 4 agree (75.0%)" in summary
        await pilot.press("s")
        solo = table_text(view.query_one("#compare-solo-table", DataTable))
        cute = next(line for line in solo.splitlines() if "| cute |" in line)
        assert "100.0%" in cute and "0.0%" in cute  # A passes its cute solo, B fails it
        await pilot.press("w")  # swap: the other experiment becomes A
        await _loaded(app, pilot, "other", "bt")


async def test_the_compare_tables_fit_100_columns(
    make_app: Any, compare_db: tuple[Path, str]
) -> None:
    db, regrade = compare_db
    app = make_app(db_path=db)
    async with app.run_test(size=(100, 30)) as pilot:
        app.push_screen(CompareScreen("bt", regrade))
        view = await _loaded(app, pilot, "bt", regrade)
        for key, tab in (("v", "verdicts"), ("p", "speedups"), ("s", "solo"), ("l", "lift"),
                         ("g", "ladder")):
            await pilot.press(key)
            table = view.query_one(f"#compare-{tab}-table", DataTable)
            await wait_until(pilot, lambda t=table: t.size.width > 0 and t.row_count > 0)
            await pilot.pause(0.1)
            assert table.virtual_size.width <= table.size.width, (
                f"{tab}: {table.virtual_size.width} columns wide in {table.size.width}")
