"""The namespace-only sandbox's pieces: the mount table and the command line that joins it."""

from __future__ import annotations

from pathlib import Path

from engine.sandbox.unjailed import join_argv, mount_table, needed_under_tmp


def test_mount_table_binds_own_folders_then_mounts_then_the_private_tmp(tmp_path: Path) -> None:
    base = tmp_path / "sb"
    own = [("work", "/workspace"), ("private0", "/mkb")]
    extra = [{"source": "/srv/data", "target": "/data"}]
    table = mount_table(base, own, extra, Path("/usr/bin"))
    assert table[:3] == [
        (base / "work", "/workspace"),
        (base / "private0", "/mkb"),
        (Path("/srv/data"), "/data"),
    ]
    assert table[-1] == (base / "tmp", "/tmp")


def test_a_python_under_tmp_stays_visible_inside_the_private_tmp(tmp_path: Path) -> None:
    python_bin = Path("/tmp/some-venv/bin")
    assert Path("/tmp/some-venv") in needed_under_tmp(python_bin)
    table = mount_table(tmp_path, [], [], python_bin)
    assert (Path("/tmp/some-venv"), str(tmp_path / "tmp" / "some-venv")) in table
    # a folder inside another needed folder is not bound twice
    nested = needed_under_tmp(Path("/tmp/some-venv/inner/bin"))
    assert not any(p != q and p.is_relative_to(q) for p in nested for q in nested)


def test_join_argv_enters_the_namespaces_and_drops_to_the_asked_user() -> None:
    as_root = join_argv(42, True, "/workspace", "root", "echo hi")
    assert as_root == [
        "nsenter",
        "-t",
        "42",
        "-m",
        "-p",
        "-n",
        "--wdns=/workspace",
        "--",
        "bash",
        "-c",
        "echo hi",
    ]
    as_agent = join_argv(42, False, "/w", "agent", "true")
    assert "-n" not in as_agent
    assert as_agent[as_agent.index("runuser") :] == [
        "runuser",
        "-u",
        "agent",
        "--",
        "bash",
        "-c",
        "true",
    ]
