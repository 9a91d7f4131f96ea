"""`mkb bundle export|verify`: the format, the checks that name a damaged member, and no
secrets in the archive."""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path

import pytest
from bundle_support import DOTENV_VALUE, FAKE_KEY, P28

from app.cli import main
from engine.bundle.archive import sha256
from engine.bundle.content import load_bundle


def _export(db: Path, out: Path, *extra: str) -> None:
    assert main(["bundle", "export", "bt", "--db", str(db), "--out", str(out), *extra]) == 0


def _member_data_offset(path: Path, name: str) -> int:
    """Where a member's compressed bytes start in the file."""
    data = path.read_bytes()
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(name)
    name_len, extra_len = struct.unpack_from("<2H", data, info.header_offset + 26)
    return info.header_offset + 30 + name_len + extra_len


def test_export_then_verify_reads_every_part(
    graded_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bt.mkb"
    _export(graded_db, out, "--all")
    capsys.readouterr()
    assert main(["bundle", "verify", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ok"] and summary["implementations"] == 8 and summary["problems"] == ["p28"]
    bundle = load_bundle(out)
    assert bundle.experiment_id == "bt" and len(bundle.attempts) == 4
    finals = [i for i in bundle.implementations if i.purpose == "final"]
    assert len(finals) == 4 and len(bundle.implementations) == 8  # --all: submissions too
    assert {i.source for i in finals} == {P28}
    catalog = Path("problems/mlp_norm/p28_fused_add_rmsnorm_h4096_llama31_8b_bf16.py")
    assert bundle.problems["p28"]["sha256"] == sha256(catalog.read_bytes())
    assert bundle.problems["p28"]["source"] == catalog.read_text()
    assert bundle.grading["contract_version"] and bundle.grading["options"] == {
        "kernel_audit": "report"
    }
    assert bundle.hosts["graded_on"][0]["device"] == "cpu (preview)"
    assert "packages" in bundle.hosts["exported_on"]
    assert len(bundle.comparisons) == 2 and bundle.analysis["experiment"]["id"] == "bt"
    assert {s["attempt_id"] for s in bundle.skills.values()} == {a["id"] for a in bundle.attempts}


def test_verify_prints_ok_with_the_digest(
    graded_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bt.mkb"
    _export(graded_db, out)
    capsys.readouterr()
    assert main(["bundle", "verify", str(out)]) == 0
    text = capsys.readouterr().out
    assert "bundle OK" in text and sha256(out.read_bytes()) in text and "4 implementations" in text


@pytest.mark.parametrize(
    "member", ["implementations/4.py", "manifest.json", "results/attempts.json"]
)
def test_one_flipped_byte_is_refused_naming_the_member(
    graded_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], member: str
) -> None:
    out = tmp_path / "bt.mkb"
    _export(graded_db, out)
    raw = bytearray(out.read_bytes())
    raw[_member_data_offset(out, member) + 3] ^= 0x20
    out.write_bytes(bytes(raw))
    capsys.readouterr()
    assert main(["bundle", "verify", str(out)]) == 1
    text = capsys.readouterr().out
    assert "bundle refused" in text and f"{member}:" in text


def test_a_flipped_byte_in_the_index_is_refused(
    graded_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bt.mkb"
    _export(graded_db, out)
    data = bytearray(out.read_bytes())
    index = data.rfind(b"PK\x01\x02")  # the last member's entry in the central directory
    data[index + 38] ^= 0x01  # its external attributes: no member's content changes
    out.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["bundle", "verify", str(out)]) == 1
    assert "(index)" in capsys.readouterr().out


def test_a_truncated_bundle_names_the_member_it_ends_in(
    graded_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bt.mkb"
    _export(graded_db, out)
    names = zipfile.ZipFile(out).namelist()
    member = [n for n in names if n.startswith("implementations/") and n.endswith(".py")][2]
    out.write_bytes(out.read_bytes()[: _member_data_offset(out, member) + 5])
    capsys.readouterr()
    assert main(["bundle", "verify", str(out), "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    named = {p["member"]: p["message"] for p in problems}
    assert "truncated" in named[member]
    assert "missing" in named["results/analysis.json"]  # every member after it is named


def test_no_secret_reaches_the_archive(
    graded_db: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The fake key sits in the environment (a key-named variable), in .env (under a name
    that looks harmless) and in the model config (a comment, and in stored feedback)."""
    (tmp_path / ".env").write_text(f"MKB_TEST_API_KEY={FAKE_KEY}\nMKB_NOTE={DOTENV_VALUE}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MKB_TEST_API_KEY", FAKE_KEY)  # as load_dotenv would set them
    monkeypatch.setenv("MKB_NOTE", DOTENV_VALUE)
    out = tmp_path / "bt.mkb"
    _export(graded_db, out, "--all")
    printed = capsys.readouterr().out
    raw = out.read_bytes()
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        contents = {name: zf.read(name) for name in zf.namelist()}
    for needle in (FAKE_KEY, DOTENV_VALUE, "llm.internal.example"):
        assert needle.encode() not in raw
        assert [n for n, data in contents.items() if needle.encode() in data] == [], needle
    manifest = json.loads(contents["manifest.json"])
    assert "implementations/index.json" in manifest["redacted"]  # the feedback's log tail
    assert any(name.startswith("skills/") for name in manifest["redacted"])  # a skill's note
    assert {"models[0].api_base", "models[0].api_key_env"} <= set(manifest["scrubbed_settings"])
    assert "[REDACTED]" in printed
    config = json.loads(contents["experiment/config.json"])
    assert config["models"][0]["name"] == "openai/test-model"  # what is not secret stays
    assert config["models"][0]["model_info"]["input_cost_per_token"] == 0.0
    assert load_bundle(out).experiment_id == "bt"  # and it still verifies
