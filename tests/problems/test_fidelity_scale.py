"""Which scale our draw runs at, and upstream files that only accept their own shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from problems.fidelity import (
    FidelityOptions,
    _our_scale,
    compare_problem,
    cost_bytes,
    destinations,
    draw_bytes,
    full_scale_bytes,
)
from problems.registry import get
from problems.upstream import load_upstream

FIXTURES = Path(__file__).parent / "fixtures" / "upstream"
SMALL = FidelityOptions(device="cpu", seed=3, budget_gb=0.01)  # our draws at smoke scale


def _variant(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """A copy of the p28 fixture with one line changed, in upstream's layout."""
    text = (FIXTURES / "problems/mlp_norm/28_fixture_add_rmsnorm.py").read_text()
    assert old in text
    folder = tmp_path / "problems" / "mlp_norm"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"28_{name}.py"
    path.write_text(text.replace(old, new))
    return path


def test_untraceable_draws_fall_back_to_the_cost_model(tmp_path):
    problem = get("p21")  # its generator reads a drawn count with .item()
    assert full_scale_bytes(problem) is None
    path = _variant(
        tmp_path, "untraceable", "return [h, r, w]", "h[0, 0].item()\n    return [h, r, w]"
    )
    module = load_upstream(path)
    expected = cost_bytes(problem)
    assert expected is not None and expected > 0
    assert draw_bytes(problem, module) == expected
    assert draw_bytes(problem, module, upstream_first=True) == expected
    roomy = FidelityOptions(device="cpu", budget_gb=expected * 10 / 1e9)
    assert _our_scale(problem, module, roomy) == "full"
    assert _our_scale(problem, module, SMALL) == "smoke"


def test_traced_upstream_draw_is_preferred_when_asked(tmp_path):
    problem = get("p28")
    module = load_upstream(FIXTURES / "problems/mlp_norm/28_fixture_add_rmsnorm.py")
    ours, theirs = draw_bytes(problem, module), draw_bytes(problem, module, upstream_first=True)
    assert ours == full_scale_bytes(problem)
    assert theirs == 8 * 4096 * 2 * 2 + 4096 * 2  # the fixture's 8 rows, bf16
    assert ours != theirs


def test_upstream_shape_asserts_skip_our_smoke_run(tmp_path):
    path = _variant(
        tmp_path,
        "asserts",
        "s = hidden_states.float()",
        "assert hidden_states.shape[0] == 8\n    s = hidden_states.float()",
    )
    row = compare_problem(get("p28"), load_upstream(path), "upstream file", SMALL)
    ours, theirs = row.runs
    assert ours.scale == "smoke" and ours.verdict == "skipped"
    assert "asserts its full-scale shapes" in ours.detail
    assert theirs.verdict == "same" and row.verdict == "same"


@pytest.mark.slow
def test_an_assert_at_full_scale_is_still_an_error(tmp_path):
    path = _variant(
        tmp_path,
        "rows",
        "s = hidden_states.float()",
        "assert hidden_states.shape[0] == 8\n    s = hidden_states.float()",
    )
    roomy = FidelityOptions(device="cpu", seed=3, budget_gb=50.0)
    row = compare_problem(get("p28"), load_upstream(path), "upstream file", roomy)
    assert row.runs[0].scale == "full" and row.runs[0].verdict == "error"
    assert row.verdict == "error"


_GATHER_FIXTURE = '''"""Upstream-layout fixture: p23's gather with the scale as a Python float."""

import torch


def reference(src_cache, block_table, seq_lens, scale):
    fp8 = src_cache.view(torch.float8_e4m3fn)
    block = src_cache.shape[1]
    rows = []
    for r, n in enumerate(seq_lens.tolist()):
        pos = torch.arange(n, device=src_cache.device)
        picked = fp8[block_table[r, pos // block].long(), pos % block]
        rows.append(picked.float() * scale * FACTOR)
    return torch.cat(rows)


def make_inputs():
    where = torch.device("cuda")
    cache = (10 * torch.randn(6, 4, 8, device=where)).to(torch.float8_e4m3fn).view(torch.uint8)
    table = torch.stack([torch.randperm(6, device=where) for _ in range(2)]).to(torch.int32)
    lens = torch.tensor([5, 9], device=where, dtype=torch.int32)
    return [cache, table, lens, SCALE]
'''


def _gather_fixture(tmp_path: Path, scale: str, factor: str = "1.0") -> Path:
    folder = tmp_path / "problems" / "kv_cache"
    folder.mkdir(parents=True)
    path = folder / "23_fixture_gather.py"
    path.write_text(_GATHER_FIXTURE + f"\n\nSCALE = {scale}\nFACTOR = {factor}\n")
    return path


def test_a_scalar_where_we_take_a_tensor_is_an_interface_difference(tmp_path):
    module = load_upstream(_gather_fixture(tmp_path, "0.25"))
    row = compare_problem(get("p23"), module, "upstream file", SMALL)
    theirs = row.runs[1]
    assert theirs.verdict == "interface differs", theirs
    assert "scale: upstream passes float, ours tensor" in theirs.detail
    assert "values agree" in theirs.detail
    assert row.runs[0].verdict == "same" and row.verdict == "interface differs"


def test_values_are_still_judged_after_adapting_a_scalar(tmp_path):
    module = load_upstream(_gather_fixture(tmp_path, "0.25", factor="1.01"))
    row = compare_problem(get("p23"), module, "upstream file", SMALL)
    assert row.runs[1].verdict == "interface differs"
    assert "values differ" in row.runs[1].detail


_DESTINATION_FIXTURE = '''"""Upstream-layout fixture: p24's gather, returning a new tensor."""

import torch


def reference(cache, block_table, seq_lens):
    block = cache.shape[1]
    rows = []
    for r, n in enumerate(seq_lens.tolist()):
        pos = torch.arange(n, device=cache.device)
        e = cache[block_table[r, pos // block].long(), pos % block]
        vals = e[:, :512].contiguous().view(torch.float8_e4m3fn).float().view(n, 4, 128)
        scales = e[:, 512:528].contiguous().view(torch.float32).view(n, 4, 1)
        latent = (vals * scales * FACTOR).view(n, 512).to(torch.bfloat16)
        rows.append(torch.cat((latent, e[:, 528:].contiguous().view(torch.bfloat16)), dim=1))
    return torch.cat(rows)


def make_inputs():
    where = torch.device("cuda")
    slots = 32
    latent = torch.randn(slots, 512, device=where).to(torch.float8_e4m3fn).view(torch.uint8)
    scales = (torch.rand(slots, 4, device=where) + 0.5).view(torch.uint8)
    rope = torch.randn(slots, 64, device=where).to(torch.bfloat16).view(torch.uint8)
    cache = torch.cat((latent, scales, rope), dim=1).view(4, 8, 656)
    table = torch.randperm(4, device=where).view(2, 2).to(torch.int32)
    return [cache, table, torch.tensor([11, 7], device=where, dtype=torch.int32)]
'''


def _destination_row(tmp_path: Path, factor: str):
    folder = tmp_path / "problems" / "kv_cache"
    folder.mkdir(parents=True)
    path = folder / "24_fixture_gather.py"
    path.write_text(_DESTINATION_FIXTURE + f"\n\nFACTOR = {factor}\n")
    return compare_problem(get("p24"), load_upstream(path), "upstream file", SMALL)


def test_our_extra_destination_is_supplied_so_values_are_compared(tmp_path):
    assert destinations(get("p24"), 3) == ("dst",)
    assert destinations(get("p23"), 3) == ()
    row = _destination_row(tmp_path, "1.0")
    assert row.interface.startswith("arguments: ours 4")
    assert [r.verdict for r in row.runs] == ["same", "same"], row.runs
    assert row.verdict == "interface differs"


def test_supplied_destination_runs_still_catch_wrong_values(tmp_path):
    row = _destination_row(tmp_path, "1.5")
    assert [r.verdict for r in row.runs] == ["differs", "differs"], row.runs
