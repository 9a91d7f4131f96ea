"""benchmarks/: one entry point lists every script, the README names each one, and the
throughput benchmark's mix and figures are what docs/benchmarks.md says they are."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(ROOT))

from benchmarks import grading_throughput as throughput  # noqa: E402
from benchmarks import run  # noqa: E402


def test_the_entry_point_lists_every_script_with_a_description() -> None:
    listed = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "list"], capture_output=True, text=True, check=True
    ).stdout
    names = {line.split()[0] for line in listed.splitlines() if line.strip()}
    on_disk = {p.name for p in [*BENCH.glob("*.py"), *BENCH.glob("*.sh")]} - {"run.py"}
    assert names == on_disk
    assert all(run.first_line(p) for p in run.scripts()), "a script without a first line"


def test_the_readme_names_every_script_and_no_removed_one() -> None:
    readme = (BENCH / "README.md").read_text()
    named = set(re.findall(r"`([a-z_]+\.(?:py|sh))", readme))
    scripts = {p.name for p in run.scripts()}
    assert scripts - named == set(), "scripts the README does not name"
    assert named - scripts - {"run.py"} == set(), "the README names scripts that are gone"


def test_an_unknown_benchmark_is_refused_with_the_way_to_list_them(capsys) -> None:  # type: ignore[no-untyped-def]
    assert run.main(["no_such_benchmark"]) == 2
    assert "run.py list" in capsys.readouterr().err


def test_the_gpu_steps_include_the_throughput_run() -> None:
    steps = subprocess.run(
        ["bash", str(BENCH / "gpu_pending.sh"), "list"], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"^\s+throughput\s", steps, re.MULTILINE)
    assert re.search(r"^\s+layers\s.*timed path", steps, re.MULTILINE)  # timed_path_layers.py


def test_the_throughput_mix_is_solutions_toml_on_a_gpu_and_honest_stand_ins_on_a_cpu() -> None:
    gpu = throughput.solutions_mix("cuda")
    cpu = throughput.solutions_mix("cpu")
    assert len(gpu) == len(cpu) == 28
    assert all(path.is_file() for _, _, path in gpu)
    assert {path.parent.name for _, _, path in gpu} == {"solutions"}
    assert {(p, d) for p, d, _ in gpu} == {
        (p, d) for p in ("p02", "p25", "p28", "p36", "p51", "p52", "p72") for d in ("cute", "tirx")
    }
    # on a CPU only plain-PyTorch files of a catalog problem: each one's id is its problem's
    assert {path.parent.name for _, _, path in cpu} == {"honest"}
    assert all(path.name.startswith(problem + "_") for problem, _, path in cpu)
    assert len(throughput.repeat_mix("cpu", 20)) == 20
    repeated = throughput.repeat_mix("cuda", 20)
    assert [d for _, d, _ in repeated] == ["cute"] * 10 + ["tirx"] * 10
    assert all(path.is_file() for _, _, path in repeated)


def test_the_summary_reads_percentiles_waits_and_compile_first_against_later() -> None:
    def row(phase: str, wait: float, compile_s: float, wall: float) -> dict[str, object]:
        return {
            "phase": phase,
            "file": "f.py",
            "verdict": "preview",
            "wall_s": wall,
            "compile_s": compile_s,
            "timings_s": {"runner_wait": wait},
        }

    rows = [row("solutions", 9.0, 0.1, 12.0), row("solutions", 8.0, 0.1, 11.0)]
    rows += [row("repeat", 0.0, 5.0, 6.0)] + [row("repeat", 0.1, 0.5, 1.0) for _ in range(9)]
    summary = throughput.summarize(rows, 60.0, {}, None, {"clients": 2})
    assert summary["gradings_per_minute"] == 12.0
    assert summary["runner_wait_p95_s"] == 8.0 and summary["runner_wait_max_s"] == 9.0
    assert summary["runner_wait_after_first_p95_s"] == 0.1  # the two first gradings set aside
    compiled = summary["compile"]["f.py"]
    assert (compiled["first_s"], compiled["later_median_s"]) == (5.0, 0.5)
    assert summary["wall_p50_s"] == 1.0
