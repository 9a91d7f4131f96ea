"""The registry finds, loads and looks up problems; the shipped catalog loads."""

from __future__ import annotations

import pytest

from problems.registry import Catalog, catalog, load_problem, problem_files
from problems.spec import FAMILIES, ProblemFormatError


def _variant(write_problem, root, pid, slug, folder="mlp_norm", family="MLP & Norm"):
    return write_problem(
        {
            'ID = "p28"': f'ID = "{pid}"',
            'SLUG = "toy_add_rmsnorm"': f'SLUG = "{slug}"',
            'FAMILY = "MLP & Norm"': f'FAMILY = "{family}"',
        },
        folder=folder,
        name=f"{pid}_{slug}.py",
        root=root,
    )


@pytest.fixture
def small_catalog(write_problem, tmp_path):
    root = tmp_path / "catalog"
    _variant(write_problem, root, "p28", "toy_norm_a")
    _variant(write_problem, root, "p29", "toy_norm_b")
    _variant(write_problem, root, "p45", "toy_moe_c", folder="moe", family="MoE")
    (root / "mlp_norm" / "_helper.py").write_text("X = 1\n")  # not a problem file
    return Catalog(load_problem(p) for p in problem_files(root))


def test_problem_files_finds_only_problem_modules(small_catalog):
    assert [p.id for p in small_catalog] == ["p28", "p29", "p45"]


@pytest.mark.parametrize("key", ["p29", "29", "toy_norm_b", " p29 "])
def test_lookup_by_id_number_or_slug(small_catalog, key):
    assert small_catalog.get(key).slug == "toy_norm_b"


def test_unknown_key_raises_key_error(small_catalog):
    with pytest.raises(KeyError, match="p30"):
        small_catalog.get("p30")


def test_select_by_glob_family_and_dedup(small_catalog):
    assert [p.id for p in small_catalog.select(["toy_norm_*"])] == ["p28", "p29"]
    assert [p.id for p in small_catalog.select(family="moe")] == ["p45"]
    assert [p.id for p in small_catalog.select(family="MLP & Norm")] == ["p28", "p29"]
    assert [p.id for p in small_catalog.select(["p28", "28", "p2*"])] == ["p28", "p29"]
    with pytest.raises(KeyError):
        small_catalog.select(["nothing_*"])
    with pytest.raises(KeyError):
        small_catalog.select(family="Vision")


def test_duplicate_slug_is_a_format_error(write_problem, tmp_path):
    root = tmp_path / "dups"
    _variant(write_problem, root, "p28", "same_slug")
    _variant(write_problem, root, "p29", "same_slug")
    with pytest.raises(ProblemFormatError, match="same_slug"):
        Catalog(load_problem(p) for p in problem_files(root))


def test_shipped_catalog_loads():
    cat = catalog()
    assert len(cat) >= 1
    for problem in cat:
        assert problem.family in FAMILIES
        assert problem.path.stem == f"{problem.id}_{problem.slug}"
        assert cat.get(problem.id) is problem and cat.get(problem.slug) is problem
