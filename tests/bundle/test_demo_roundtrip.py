"""The demo experiment's round trip: export → verify → regrade in CPU preview agrees on every
verdict, and a copy of the bundle with one flipped byte is refused."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from app.cli import main
from engine.sandbox.local_ns import namespace_support_problem
from storage import provenance
from storage.db import open_db


@pytest.mark.slow
@pytest.mark.xdist_group("demo")  # shares one demo run with tests/engine/test_demo.py
@pytest.mark.skipif(
    namespace_support_problem() is not None,
    reason=f"local namespace sandbox unavailable: {namespace_support_problem()}",
)
def test_demo_export_verify_regrade_agrees_on_every_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], demo_store: tuple[Path, str]
) -> None:
    demo, bundle, out = tmp_path / "demo.sqlite", tmp_path / "demo.mkb", tmp_path / "rg.sqlite"
    source, copy = sqlite3.connect(demo_store[0]), sqlite3.connect(demo)
    source.backup(copy)  # the shared demo store stays as the demo left it
    source.close()
    copy.close()
    assert main(["bundle", "export", "demo", "--db", str(demo), "--out", str(bundle)]) == 0
    assert main(["bundle", "verify", str(bundle)]) == 0
    flipped = tmp_path / "flipped.mkb"
    raw = bytearray(bundle.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    flipped.write_bytes(bytes(raw))
    assert main(["bundle", "verify", str(flipped)]) == 1
    capsys.readouterr()
    assert main(["regrade", str(bundle), "--db", str(out), "--device", "cpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    verdicts = report["verdicts"]
    assert verdicts["compared"] == 8 and verdicts["agreement"] == 1.0
    assert verdicts["changed"] == [] and verdicts["not_regraded"] == []
    assert report["tables"]["b"]["preview"]  # a CPU re-grade is labelled PREVIEW
    db = open_db(out, readonly=True)
    stored = provenance.latest_report(db, report["regrade_experiment"], "regrade")
    db.conn.close()
    assert stored is not None and stored.payload["verdicts"]["agreement"] == 1.0
